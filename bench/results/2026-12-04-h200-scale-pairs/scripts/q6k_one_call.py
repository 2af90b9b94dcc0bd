"""One 8-token Q6_K down (4096 x 14336) call of the words form, three times, for ncu (call D):
whether Q6_K's tensor-core kernel is bound by its loads (2-byte ones, its rows being only 2-byte
aligned) as the Q4_K one was (../../2026-12-04-h200-mma-dequant-cost/)."""

import torch

from kvspill.bench.kernels_gguf import random_weight_cuda
from kvspill.kernels.gguf_mma import quant_matmul_mma

weight = random_weight_cuda("Q6_K", 4096, 14336)
x = torch.randn(8, 14336, dtype=torch.bfloat16, device="cuda")
for _ in range(3):
    quant_matmul_mma(x, weight)
torch.cuda.synchronize()
print("done")
