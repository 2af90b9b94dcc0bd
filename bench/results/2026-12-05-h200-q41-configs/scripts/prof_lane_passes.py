"""profile_decode with KVSPILL_LANE_PASSES's Q4_1 / Q8_0 passes one token each (ONE_TOKEN_PASSES=1:
gguf_gemv.TWO_TOKEN_LANES emptied), to time the kernels' TWO form against two one-token launches.
    ONE_TOKEN_PASSES=1 KVSPILL_LANE_PASSES=3 python3 prof_lane_passes.py ARGS..."""

import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv

if os.environ.get("ONE_TOKEN_PASSES") == "1":
    gguf_gemv.TWO_TOKEN_LANES = ()
    print("lane passes: one token a launch", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
