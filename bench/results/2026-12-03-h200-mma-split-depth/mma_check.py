"""The dispatcher's mma configs (split K by depth) against the fp32 product of the dequantized
weights on the 8B Q4_K_M shapes at 4 / 8 / 16 / 32 tokens: max error / max |ref|."""
import torch
from kvspill.bench.kernels_gguf import random_weight_cuda
from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.kernels.gguf_mma import mma_config
from kvspill.kernels.quant_linear import quant_linear

worst = 0.0
for qtype, n, k in [("Q4_K", 6144, 4096), ("Q6_K", 1024, 4096), ("Q4_K", 4096, 14336), ("Q6_K", 4096, 14336)]:
    w = random_weight_cuda(qtype, n, k)
    wd = dequantize_ref(w.data, w.qtype, w.in_features).float()
    for t in (4, 8, 16, 32):
        x = torch.randn((t, k), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ wd.t()
        got = quant_linear(x, w).float()
        err = float((got - ref).abs().max() / ref.abs().max())
        worst = max(worst, err)
        cfg = mma_config(w, t)
        print(qtype, n, k, t, None if cfg is None else (cfg.block_n, cfg.split_k), f"rel {err:.2e}", flush=True)
print(f"worst rel {worst:.2e}", "ok" if worst < 1e-2 else "BAD")
