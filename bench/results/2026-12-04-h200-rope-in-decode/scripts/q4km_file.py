"""A random-weight Llama-3.1-8B-shaped Q4_K_M GGUF, written directly (no f16 file, no llama-quantize):
llama-quantize's type mix (kvspill.model.random_init.q4_k_m_type: Q6_K for output and, in the
use_more_bits layers, attn_v and ffn_down; Q4_K elsewhere), valid blocks from
kvspill.kernels.gguf_formats.random_quantized, metadata as shared/bench/llamacpp_peer.sh's model
step writes it. Usage: python3 q4km_file.py OUT.gguf"""
import sys

import gguf
import numpy as np
import torch

from kvspill.kernels.gguf_formats import random_quantized
from kvspill.model.random_init import q4_k_m_type

H, I, L, NH, NKV, HD, V = 4096, 14336, 32, 32, 8, 128, 128256
GGML = {"Q4_K": gguf.GGMLQuantizationType.Q4_K, "Q6_K": gguf.GGMLQuantizationType.Q6_K}
gen = torch.Generator().manual_seed(0)
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_context_length(131072); w.add_embedding_length(H); w.add_block_count(L); w.add_feed_forward_length(I)
w.add_head_count(NH); w.add_head_count_kv(NKV); w.add_rope_freq_base(500000.0); w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(HD); w.add_vocab_size(V); w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
w.add_tokenizer_model("llama"); w.add_token_list([f"<t{i}>".encode() for i in range(V)])
w.add_token_scores([0.0] * V); w.add_token_types([1] * V); w.add_bos_token_id(1); w.add_eos_token_id(2)


def quant(name, qtype, rows, cols):
    q = random_quantized(qtype, rows, cols, gen, 0.01)
    w.add_tensor(name, q.data.numpy(), raw_shape=(rows, q.data.shape[1]), raw_dtype=GGML[qtype])


quant("token_embd.weight", "Q4_K", V, H)
w.add_tensor("output_norm.weight", np.ones(H, np.float32))
quant("output.weight", "Q6_K", V, H)
for b in range(L):
    p = f"blk.{b}."
    for n in ("attn_norm", "ffn_norm"):
        w.add_tensor(p + n + ".weight", np.ones(H, np.float32))
    for gname, hname, rows, cols in (("attn_q", "q_proj", NH * HD, H), ("attn_k", "k_proj", NKV * HD, H),
                                     ("attn_v", "v_proj", NKV * HD, H), ("attn_output", "o_proj", H, NH * HD),
                                     ("ffn_gate", "gate_proj", I, H), ("ffn_up", "up_proj", I, H),
                                     ("ffn_down", "down_proj", H, I)):
        quant(p + gname + ".weight", q4_k_m_type(hname, b, L), rows, cols)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file()
w.close()
print("wrote", sys.argv[1])
