"""Call 4: one gate_up (28672 x 4096 Q4_K) product at 8 and 32 tokens by the CUDA kernel's best
configs of call 3 and by the Triton words form, each launched twice, for Nsight Compute
(`ncu --kernel-name regex:q4k --launch-skip ...`, see call4.sh)."""

import sys

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config

import q4k_mma_cuda as qc
from sweep_common import with_pairs

w = with_pairs(random_weight_cuda("Q4_K", *SHAPES["gate_up"]))
for tokens, cfg in ((8, qc.CudaConfig(1, 8, 2, split_k=1)), (32, qc.CudaConfig(1, 8, 2, split_k=1))):
    x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
    for _ in range(2):
        qc.q4k_matmul_cuda(x, w, config=cfg)
        quant_matmul_mma(x, w, config=mma_config(w, tokens))
    torch.cuda.synchronize()
print("done")
