"""Call 6: design b (the GGUF rows as they are) against design c (the same kernel on weights
repacked a 16-row tile and super-block at a time, `q4k_mma_cuda.repack_tiled`: each 16-byte load
of a warp one 512-byte run) at 1, 8 and 32 tokens, beside today's kernels (the int16-x GEMV at
one token, the Triton words form at more); checked, then timed as sweep.py."""

import json
import sys

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda
from kvspill.kernels.gguf_dequant import dequantize

import q4k_mma_cuda as qc
from sweep_common import copies, time_configs, today_us, with_pairs

C = qc.CudaConfig
CONFIGS = [C(1, 8, 2, design="b"), C(1, 4, 2, design="b"), C(1, 8, 2, design="c"), C(1, 4, 2, design="c"),
           C(1, 8, 3, design="c"), C(1, 2, 2, design="c")]
if "interleave" in sys.argv[1:]:  # call 8: design d (the GGUF super-blocks of a tile side by side)
    CONFIGS = [C(1, 8, 2, design="c"), C(1, 4, 2, design="c"), C(1, 8, 2, design="d"), C(1, 4, 2, design="d"),
               C(1, 2, 2, design="d"), C(1, 8, 2, design="d", ahead=2)]
if "ahead" in sys.argv[1:]:  # call 7: two super-blocks of weights in flight, designs b and c
    CONFIGS = [C(1, 8, 2, design="c"), C(1, 4, 2, design="c"), C(1, 8, 2, design="c", ahead=2),
               C(1, 4, 2, design="c", ahead=2), C(1, 2, 2, design="c", ahead=2), C(1, 4, 2, design="b", ahead=2)]
for shape in ("gate_up", "down", "qkv", "o"):
    w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
    ws = copies(w)
    tiled = [qc.repack_tiled(c) for c in ws]
    inter = [qc.interleave_rows(c) for c in ws] if "interleave" in sys.argv[1:] else []
    dense = dequantize(w, torch.float32)
    for tokens in (1, 8, 32):
        x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
        row = dict(shape=shape, tokens=tokens, today_us=round(today_us(x, ws), 2))
        weights_for = lambda c, t=tiled, i=inter, g=ws: {"c": t, "d": i}.get(c.design, g)  # noqa: E731
        name_of = lambda c: f"w{c.warps}s{c.stages}{c.design}a{c.ahead}k{c.split_k}"  # noqa: E731
        best = time_configs(row, x, x.float() @ dense.t(), weights_for, CONFIGS, name_of)
        row["best"] = [round(best[0], 2), best[1]]
        print(json.dumps(row), flush=True)
    del ws, tiled, inter, dense
    torch.cuda.empty_cache()
