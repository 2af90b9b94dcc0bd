"""CPU emulation of the words form's rounding (scales and mins to bf16, one bf16 rounding of q * dsc - dm) on a random Q4_K weight: the lm_head check of tests/engine/test_gpu.py against fp32 products."""
import torch
from kvspill.kernels.gguf_formats import random_quantized, dequantize_ref
gen = torch.Generator().manual_seed(0)
rows, k = 4096, 2048
w = random_quantized("Q4_K", rows, k, gen, 0.002)
exact = dequantize_ref(w.data, "Q4_K", k, torch.float32)
# emulate the words form: per sub-block (32 weights) dsc, dm in bf16; w = bf16(q * dsc_b - dm_b)
data = w.data.view(rows, k // 256, 144)
d = data[..., 0:2].contiguous().view(torch.float16).float()      # [rows, nsb, 1]
dmin = data[..., 2:4].contiguous().view(torch.float16).float()
sc_bytes = data[..., 4:16].long()
def scale_min(s):
    if s < 4:
        return sc_bytes[..., s] & 63, sc_bytes[..., s + 4] & 63
    return (sc_bytes[..., s + 4] & 0xF) | ((sc_bytes[..., s - 4] >> 6) << 4), (sc_bytes[..., s + 4] >> 4) | ((sc_bytes[..., s] >> 6) << 4)
qs = data[..., 16:].long()   # [rows, nsb, 128]
out = torch.empty(rows, k // 256, 256)
for s in range(8):
    sc, m = scale_min(s)
    dsc = (d[..., 0] * sc.float()).to(torch.bfloat16).float()
    dm = (dmin[..., 0] * m.float()).to(torch.bfloat16).float()
    j, h = s // 2, s % 2
    q = (qs[..., 32 * j: 32 * j + 32] >> (4 * h)) & 0xF
    out[..., 32 * s: 32 * s + 32] = (q.float() * dsc[..., None] - dm[..., None]).to(torch.bfloat16).float()
words = out.view(rows, k)
print("max weight", float(exact.abs().max()), "words err", float((words - exact).abs().max()), "bf16 err", float((exact.to(torch.bfloat16).float() - exact).abs().max()))
bf16w = exact.to(torch.bfloat16).float()
hidden = torch.randn(3, k, generator=gen).to(torch.bfloat16).float()
want = hidden @ exact.T
tol = want.abs().max() * 2**-8
for name, ww in (("words", words), ("bf16 weights", bf16w)):
    err = (hidden @ ww.T - want).abs().max()
    print(name, "err", float(err), "tol", float(tol), "max", float(want.abs().max()))
