import torch
from kvspill.bench.kernels_gguf import random_weight_cuda
from kvspill.kernels.gguf_gemv import quant_matmul_gemv
for shape in ((28672, 4096), (6144, 4096)):
    w = random_weight_cuda("Q4_K", *shape)
    x = torch.randn((1, shape[1]), dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        quant_matmul_gemv(x, w)
torch.cuda.synchronize()
