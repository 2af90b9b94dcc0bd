"""profile_decode with q6k_int16x_kernel's config for split weights from SPLIT_PICKS
(split_gemv_sweep.py's split_picks.json: the shape nearest in rows and columns); gguf's layout
keeps the table."""
import json
import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv

SH = {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096), "l1b_down": (2048, 8192)}
picks = json.load(open(os.environ["SPLIT_PICKS"]))
picks = {n: c for n, c in picks.items() if c != "table"}
table, launch = gguf_gemv.Q6K_INT16X_CONFIGS, gguf_gemv._launch_q6k_int16x


def _launch(x, weight, bias, out):
    rows, k = weight.out_features, weight.in_features
    near = min(SH, key=lambda n: abs(SH[n][0] - rows) / SH[n][0] + abs(SH[n][1] - k) / SH[n][1])
    if weight.split and near in picks and SH[near] == (rows, k):
        gguf_gemv.Q6K_INT16X_CONFIGS = ((0, 0, tuple(picks[near])),)
    try:
        launch(x, weight, bias, out)
    finally:
        gguf_gemv.Q6K_INT16X_CONFIGS = table


gguf_gemv._launch_q6k_int16x = _launch
print("split picks:", picks, flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
