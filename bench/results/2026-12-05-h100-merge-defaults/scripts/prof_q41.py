"""profile_decode with Q4_1's one-token configs from Q41_PICKS (q41_sweep.py's picks file): each 8B
shape's pick where it has one, the table's config elsewhere (the lm_head keeps it); unset: as
shipped.   python3 prof_q41.py PROFILE_DECODE_ARGS..."""

import json
import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv

path = os.environ.get("Q41_PICKS")
if path:
    picks, table = json.load(open(path)), gguf_gemv.Q41_INT16X_CONFIGS

    def cfg(name, rows, k):
        p = picks.get(name, "table")
        return tuple(p) if p != "table" else next(c for mk, mr, c in table if k >= mk and rows >= mr)

    gguf_gemv.Q41_INT16X_CONFIGS = (
        (0, 65536, cfg("lm_head", 128256, 4096)),
        (8192, 0, cfg("down", 4096, 14336)),
        (0, 16384, cfg("gate_up", 28672, 4096)),
        (0, 6144, cfg("qkv", 6144, 4096)),
        (0, 0, cfg("o", 4096, 4096)),
    )
    print(f"Q4_1 configs {gguf_gemv.Q41_INT16X_CONFIGS}", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
