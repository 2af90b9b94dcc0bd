"""The one-token int16-x GEMV's (CHUNK, BLOCK_N, warps) configs in the layout argv[1] (as
sweep_layouts.py: gguf, split, split8, "+load16" naming the kernel copy), each forced through
gguf_gemv.Q4K_INT16X_CONFIGS, checked, then timed over rotating copies."""

import json
import os
import sys
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-split-rows/scripts")
import sweep_layouts
from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.quant_linear import quant_linear

sweep_layouts.LAYOUT = LAYOUT = sys.argv[1]
CONFIGS = [tuple(int(v) for v in c.split(",")) for c in os.environ["CONFIGS"].split()] if "CONFIGS" in os.environ else [(4096, 16, 4), (4096, 8, 4), (2048, 8, 2), (1024, 8, 1), (2048, 16, 4), (2048, 16, 2), (4096, 8, 2),
           (2048, 4, 2), (4096, 4, 4), (1024, 16, 2), (1024, 4, 1), (2048, 8, 4), (4096, 16, 8), (2048, 32, 4),
           (4096, 4, 2), (1024, 8, 2)]
for shape in ("qkv", "o", "gate_up", "down"):
    w = random_weight_cuda("Q4_K", *SHAPES[shape])
    ws = [sweep_layouts.laid_out(c) for c in _copies(w)]
    dense = dequantize(w, torch.float32)
    x = torch.randn((1, w.in_features), dtype=torch.bfloat16, device="cuda")
    ref = x.float() @ dense.t()
    row = dict(layout=LAYOUT, shape=shape)
    for cfg in CONFIGS:
        gguf_gemv.Q4K_INT16X_CONFIGS = ((0, 0, cfg),)
        try:
            err = float((quant_linear(x, ws[0]).float() - ref).abs().max()) / float(ref.abs().max())
            us = time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
            row[str(cfg)] = round(us, 2) if err < 2e-2 else f"wrong {err:.3g}"
        except Exception as e:  # noqa: BLE001
            row[str(cfg)] = f"error: {str(e)[:120]}"
    print(json.dumps(row), flush=True)
    del ws, dense
    torch.cuda.empty_cache()
