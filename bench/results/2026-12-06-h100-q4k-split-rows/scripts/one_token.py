"""Call 7: the one-token int16-x GEMV (the table's config) on qkv and gate_up in the layout argv[1]
(as sweep_layouts.py), timed; run with TRITON_CACHE_DIR set so the compiled kernels come back."""

import json
import sys

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-split-rows/scripts")
import sweep_layouts
from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.quant_linear import quant_linear

sweep_layouts.LAYOUT = sys.argv[1]
for shape in ("qkv", "gate_up"):
    w = random_weight_cuda("Q4_K", *SHAPES[shape])
    ws = [sweep_layouts.laid_out(c) for c in _copies(w)]
    x = torch.randn((1, w.in_features), dtype=torch.bfloat16, device="cuda")
    us = time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
    print(json.dumps(dict(layout=sys.argv[1], shape=shape, us=round(us, 2))), flush=True)
