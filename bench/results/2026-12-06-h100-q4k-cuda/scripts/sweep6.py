"""Calls 10, 11: the one-token int16-x GEMV's (CHUNK, BLOCK_N, warps) configs on gguf's rows (argv[1]
"gguf", this tree) and on design d's interleaved layout (argv[1] "interleave", PYTHONPATH at
interleave_patch.py's copy), each config forced through gguf_gemv.Q4K_INT16X_CONFIGS: can a
config win back the qkv shape's loss of call 9? Checked, then timed as sweep.py."""

import json
import sys

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.quant_linear import quant_linear

from sweep5 import interleaved
from sweep_common import copies, with_pairs

LAYOUT = sys.argv[1]
# call 11 ("short" after the layout): one or two super-blocks a K step, so that a 16-row program's
# step reads one contiguous run of the interleaved tile
SHORT = [(256, 16, 1), (256, 16, 2), (256, 16, 4), (512, 16, 1), (512, 16, 2), (512, 16, 4), (256, 32, 2),
         (256, 32, 4), (512, 32, 2), (512, 32, 4), (1024, 16, 4), (1024, 32, 4), (256, 8, 1), (512, 8, 2)]
CONFIGS = SHORT if "short" in sys.argv[2:] else [(1024, 8, 1), (2048, 8, 2), (4096, 8, 4), (4096, 16, 4), (2048, 16, 2), (2048, 16, 4), (1024, 16, 2),
           (4096, 32, 4), (2048, 32, 4), (1024, 4, 1), (2048, 4, 2), (4096, 4, 4)]
for shape in ("qkv", "o", "gate_up", "down"):
    w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
    ws = copies(w)
    dense = dequantize(w, torch.float32)
    if LAYOUT == "interleave":
        ws = [interleaved(c) for c in ws]
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
