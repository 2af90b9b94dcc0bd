"""Calls 3 and 5: the CUDA Q4_K kernel's configs (design a: x staged or read from global memory,
warps, rows, stages; call 5: design b, q4k_mma_b.cu) and every split K on Llama-3.1-8B's Q4_K
shapes, beside today's kernels (checked, then medians of CUDA-graph replays over rotating copies).
`python sweep3.py call3` is call 3's set (design a, 8 and 32 tokens), without it call 5's."""

import json
import sys

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda
from kvspill.kernels.gguf_dequant import dequantize

import q4k_mma_cuda as qc
from sweep_common import copies, time_configs, today_us, with_pairs

C = qc.CudaConfig
CALL3 = "call3" in sys.argv[1:]
if CALL3:
    CONFIGS = [C(1, 8, 3), C(1, 8, 3, x_global=True), C(1, 4, 4, x_global=True), C(2, 4, 4, x_global=True),
               C(1, 2, 4, x_global=True), C(1, 2, 4), C(1, 8, 2), C(1, 4, 3, x_global=True), C(2, 8, 3, x_global=True)]
    TOKENS = (8, 32)
else:
    CONFIGS = [C(1, 8, 2), C(1, 4, 3, design="b"), C(1, 8, 3, design="b"), C(1, 4, 2, design="b"),
               C(1, 8, 2, design="b"), C(1, 2, 3, design="b"), C(1, 2, 2, design="b")]
    TOKENS = (1, 8, 16, 32)


def name_of(c):  # call 3 named x_global "g", call 5 the design
    kind = ("g" if c.x_global else "") if CALL3 else c.design
    return f"m{c.m_tiles}w{c.warps}s{c.stages}{kind}k{c.split_k}"


for shape in ("qkv", "o", "gate_up", "down"):
    w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
    ws = copies(w)
    dense = dequantize(w, torch.float32)
    for tokens in TOKENS:
        x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
        row = dict(shape=shape, tokens=tokens, triton_us=round(today_us(x, ws), 2))
        best = time_configs(row, x, x.float() @ dense.t(), lambda c, ws=ws: ws, CONFIGS, name_of)
        row["best"] = [round(best[0], 2), best[1]]
        print(json.dumps(row), flush=True)
    del ws, dense
    torch.cuda.empty_cache()
