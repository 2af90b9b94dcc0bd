"""CPU check of fused_norm.py's forward against the original on a tiny random Q4_K_M Llama (Triton's
interpreter runs the kernels): TRITON_INTERPRET=1 python cpu_check.py"""
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
import torch
from transformers import LlamaConfig
from kvspill.model.llama import LlamaForCausalLM
from kvspill.model import random_init
import fused_norm

cfg = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=128, vocab_size=300, max_position_embeddings=64, rms_norm_eps=1e-5)
torch.manual_seed(0)
with torch.device("meta"):
    net = LlamaForCausalLM(cfg, max_model_len=64, dtype=torch.bfloat16)
    random_init._quantize_randomly(net, "Q4_K_M", torch.bfloat16)
net.to_empty(device="cpu")
net.init_buffers()
random_init._fill_quantized(net, "Q4_K_M", torch.Generator().manual_seed(1))
for n, p in net.named_parameters():
    if "norm" in n:
        p.data = (torch.rand_like(p, dtype=torch.float32) + 0.5).to(p.dtype)
net.eval()
print([(type(l.self_attn.qkv_proj).__name__, [p.qtype for p in l.self_attn.qkv_proj.parts], [p.qtype for p in l.mlp.down_proj.parts]) for l in net.model.layers])

def attention(layer_idx, q, k, v, rope=None):  # one token, no cache: each head's output is its v
    group = q.shape[1] // v.shape[1]
    return v.repeat_interleave(group, dim=1)

ids, pos = torch.tensor([7]), torch.tensor([3])
with torch.no_grad():
    want = fused_norm._orig(net.model, ids, pos, attention).float()
    fused_norm._checked.clear()
    real = torch.Tensor.is_cuda
    torch.Tensor.is_cuda = property(lambda self: True)  # let the prototype take the CPU tensors
    try:
        got = net.model(ids, pos, attention).float()
    finally:
        torch.Tensor.is_cuda = real
err = float((got - want).abs().max() / want.abs().max())
print("max error / max:", err, "cos:", float(torch.nn.functional.cosine_similarity(got, want)))
assert err < 3e-2, err
