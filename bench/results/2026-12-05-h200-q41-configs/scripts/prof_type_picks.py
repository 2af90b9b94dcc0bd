"""profile_decode with a type's one-token configs from PICKS (type_sweep.py's picks file) for the 8B
shapes, the table's config where a shape has no pick; TYPE Q5_K or Q4_1; PICKS unset: as shipped.
    TYPE=Q5_K PICKS=OUT/Q5_K_picks.json python3 prof_type_picks.py PROFILE_DECODE_ARGS..."""

import json
import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv

path, qtype = os.environ.get("PICKS"), os.environ.get("TYPE", "Q5_K")
if path:
    name = {"Q5_K": "Q5K_INT16X_CONFIGS", "Q4_1": "Q41_INT16X_CONFIGS", "Q8_0": "Q80_INT16X_CONFIGS"}[qtype]
    picks, table = json.load(open(path)), getattr(gguf_gemv, name)

    def cfg(shape, rows, k):
        p = picks.get(shape, "table")
        return tuple(p) if p != "table" else next(c for mk, mr, c in table if k >= mk and rows >= mr)

    setattr(
        gguf_gemv,
        name,
        (
            (0, 65536, cfg("lm_head", 128256, 4096)),
            (8192, 0, cfg("down", 4096, 14336)),
            (0, 16384, cfg("gate_up", 28672, 4096)),
            (0, 6144, cfg("qkv", 6144, 4096)),
            (4096, 0, cfg("o", 4096, 4096)),
        )
        + table,  # other shapes (a 1B's) as shipped
    )
    print(f"{qtype} configs {getattr(gguf_gemv, name)}", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
