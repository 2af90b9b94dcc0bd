"""Write a random Llama-shaped GGUF with llama-quantize's Q4_K_M type mix (model/random_init.q4_k_m_type)."""
import sys
import numpy as np, gguf, torch
from kvspill.kernels.gguf_formats import random_quantized
from kvspill.model.random_init import q4_k_m_type
from kvspill.plan.spec import KNOWN_SHAPES

shape, path = sys.argv[1], sys.argv[2]
s = KNOWN_SHAPES[shape]
H, L, I, NH, NKV, HD, V = s.hidden_size, s.num_layers, s.intermediate_size, s.num_heads, s.num_kv_heads, s.head_dim, s.vocab_size
gen = torch.Generator().manual_seed(0)
w = gguf.GGUFWriter(path, "llama")
w.add_context_length(131072); w.add_embedding_length(H); w.add_block_count(L); w.add_feed_forward_length(I)
w.add_head_count(NH); w.add_head_count_kv(NKV); w.add_rope_freq_base(500000.0); w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(HD); w.add_vocab_size(V); w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
w.add_tokenizer_model("llama"); w.add_token_list([f"<t{i}>".encode() for i in range(V)])
w.add_token_scores([0.0] * V); w.add_token_types([1] * V); w.add_bos_token_id(1); w.add_eos_token_id(2)

def q(name, qtype, rows, cols):
    data = random_quantized(qtype, rows, cols, gen).data.numpy()
    w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[qtype])

q("token_embd.weight", "Q6_K" if s.tie_word_embeddings else "Q4_K", V, H)
w.add_tensor("output_norm.weight", np.ones(H, np.float32))
if not s.tie_word_embeddings:
    q("output.weight", q4_k_m_type("lm_head", 0, L), V, H)
for i in range(L):
    p = f"blk.{i}."
    for n in ("attn_norm", "ffn_norm"):
        w.add_tensor(p + n + ".weight", np.ones(H, np.float32))
    for gname, hname, rows, cols in (("attn_q", "q_proj", NH * HD, H), ("attn_k", "k_proj", NKV * HD, H), ("attn_v", "v_proj", NKV * HD, H),
                                     ("attn_output", "o_proj", H, NH * HD), ("ffn_gate", "gate_proj", I, H), ("ffn_up", "up_proj", I, H), ("ffn_down", "down_proj", H, I)):
        q(p + gname + ".weight", q4_k_m_type(hname, i, L), rows, cols)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("wrote", path)
