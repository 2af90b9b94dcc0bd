"""A random-weight f16 GGUF of a Llama shape (as shared/bench/llamacpp_peer.sh `model` writes it),
but with a real byte-level BPE tokenizer (SmolLM2's tokens and merges, padded with reserved tokens
to the 128,256 rows of Llama 3): the peer script's `<tN>` SPM vocabulary has no merges, and
transformers takes ~25 min to build them on the fly when it loads the tokenizer.
Usage: make_model.py SHAPE OUT.gguf"""
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ.get("PEER", ".peer"), "llama.cpp", "gguf-py"))
import gguf

shape, path = sys.argv[1], sys.argv[2]
H, I, L, NH, NKV, HD, V = {"8b": (4096, 14336, 32, 32, 8, 128, 128256), "3b": (3072, 8192, 28, 24, 8, 128, 128256),
                            "tiny": (256, 512, 2, 4, 2, 64, 128256)}[shape]
tok = json.load(open(os.path.join(os.path.dirname(__file__), "smollm2_tokenizer.json")))
tokens = tok["tokenizer.ggml.tokens"] + [f"<|reserved_{i}|>" for i in range(V - len(tok["tokenizer.ggml.tokens"]))]
types = tok["tokenizer.ggml.token_type"] + [gguf.TokenType.CONTROL] * (V - len(tok["tokenizer.ggml.token_type"]))
w = gguf.GGUFWriter(path, "llama")
w.add_context_length(131072); w.add_embedding_length(H); w.add_block_count(L); w.add_feed_forward_length(I)
w.add_head_count(NH); w.add_head_count_kv(NKV); w.add_rope_freq_base(500000.0); w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(HD); w.add_vocab_size(V); w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre(tok["tokenizer.ggml.pre"]); w.add_token_list(tokens)
w.add_token_types(types); w.add_token_merges(tok["tokenizer.ggml.merges"])
w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_add_bos_token(False)
w.add_chat_template(tok["tokenizer.chat_template"])
pool = (np.random.default_rng(0).standard_normal(1 << 26, dtype=np.float32) * 0.02).astype(np.float16)
def rnd(*s):
    n = int(np.prod(s)); return np.tile(pool, -(-n // pool.size))[:n].reshape(s)
w.add_tensor("token_embd.weight", rnd(V, H)); w.add_tensor("output_norm.weight", np.ones(H, np.float32))
w.add_tensor("output.weight", rnd(V, H))
for b in range(L):
    p = f"blk.{b}."
    for n in ("attn_norm", "ffn_norm"): w.add_tensor(p + n + ".weight", np.ones(H, np.float32))
    w.add_tensor(p + "attn_q.weight", rnd(NH * HD, H)); w.add_tensor(p + "attn_k.weight", rnd(NKV * HD, H))
    w.add_tensor(p + "attn_v.weight", rnd(NKV * HD, H)); w.add_tensor(p + "attn_output.weight", rnd(H, NH * HD))
    w.add_tensor(p + "ffn_gate.weight", rnd(I, H)); w.add_tensor(p + "ffn_up.weight", rnd(I, H)); w.add_tensor(p + "ffn_down.weight", rnd(H, I))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("wrote", path)
