"""One 8-token Q4_K gate_up call of the words form (VARIANT as in dequant_cost.py), for ncu."""
import runpy
import sys

import torch

runpy.run_path(__file__.replace("one_call.py", "dequant_cost.py"), run_name="patch_only")
from kvspill.bench.kernels_gguf import random_weight_cuda  # noqa: E402
from kvspill.kernels.gguf_mma import quant_matmul_mma  # noqa: E402

weight = random_weight_cuda("Q4_K", 28672, 4096)
x = torch.randn(8, 4096, dtype=torch.bfloat16, device="cuda")
for _ in range(3):
    quant_matmul_mma(x, weight)
torch.cuda.synchronize()
print("done", sys.argv[1:])
