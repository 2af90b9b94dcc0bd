"""Whether Q6_K's tensor-core words form gains from precomputed scales as Q4_K did (prepared, not
run): with `q6k_prescaled.diff` applied, the Llama-3.1-8B Q6_K shapes at 8 bf16 tokens (a mixed
layer's v 1024 x 4096, down 4096 x 14336, the lm_head 128256 x 4096), us per call from graph
replays over weight copies past L2, the header's scales against `pack_q6k_scales`' values (d *
scale per 16 weights in bf16, 32 bytes a 210-byte super-block); the largest difference of the
two outputs. Prints one JSON line."""

import json

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_words import pack_q6k_scales

SHAPES = {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}
result: dict = {}
for name, (rows, cols) in SHAPES.items():
    weight = random_weight_cuda("Q6_K", rows, cols)
    x = torch.randn(8, cols, dtype=torch.bfloat16, device="cuda")
    copies = _copies(weight)
    paired = [QuantizedWeight(w.data, "Q6_K", rows, cols, pack_q6k_scales(w, x.dtype)) for w in copies]
    header_us = time_rotating_us(quant_matmul_mma, copies, x)
    paired_us = time_rotating_us(quant_matmul_mma, paired, x)
    diff = (quant_matmul_mma(x, weight) - quant_matmul_mma(x, paired[0])).abs().max()
    result[name] = {
        "header_us": round(header_us, 2),
        "prescaled_us": round(paired_us, 2),
        "max_diff": float(diff),
    }
print(json.dumps(result), flush=True)
