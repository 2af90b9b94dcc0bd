"""Call 4: the one-token int16-x GEMV on qkv, o and gate_up in the layout of argv[1] (gguf / split /
split8, PYTHONPATH at the matching copy), each launch after 256 MB of copies so its weights come
from DRAM, for Nsight Compute (`ncu --replay-mode application --kernel-name regex:int16x`)."""

import sys
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-split-rows/scripts")
import sweep_layouts
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda
from kvspill.kernels.gguf_mma_words import pack_scales
from kvspill.kernels.quant_linear import quant_linear

sweep_layouts.LAYOUT = sys.argv[1]
flush_a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
flush_b = torch.empty_like(flush_a)
for shape in ("qkv", "o", "gate_up"):
    w = random_weight_cuda("Q4_K", *SHAPES[shape])
    w = sweep_layouts.laid_out(replace(w, scale_pairs=pack_scales(w, torch.bfloat16)))
    x = torch.randn((1, w.in_features), dtype=torch.bfloat16, device="cuda")
    for _ in range(2):
        flush_b.copy_(flush_a)
        quant_linear(x, w)
    torch.cuda.synchronize()
print("done")
