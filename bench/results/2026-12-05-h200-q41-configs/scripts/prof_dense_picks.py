"""profile_decode with the one-token dense / fp8 GEMV tiles of DENSE_PICKS (dense_sweep.py's picks
file: {"BYTES:NxK": [block_n, block_k, warps, stages]}) where a shape has one, gemv_config's
elsewhere; unset: as shipped.   DENSE_PICKS=OUT/dense_picks.json python3 prof_dense_picks.py ARGS..."""

import json
import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import fp8_gemv

path = os.environ.get("DENSE_PICKS")
if path:
    picks = {key: fp8_gemv.GemvConfig(*cfg) for key, cfg in json.load(open(path)).items()}
    shipped = fp8_gemv.gemv_config

    def gemv_config(num_tokens, n, k, weight_bytes=2):
        pick = picks.get(f"{weight_bytes}:{n}x{k}") if num_tokens == 1 else None
        return pick or shipped(num_tokens, n, k, weight_bytes)

    fp8_gemv.gemv_config = gemv_config
    print(f"dense picks {picks}", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
