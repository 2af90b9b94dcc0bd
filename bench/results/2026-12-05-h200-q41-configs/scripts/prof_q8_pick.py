"""profile_decode with Q8_0's one-token config from Q8_PICK (q8_sweep.py's pick file); unset or
"table": as shipped.   Q8_PICK=OUT/q8_pick.json python3 prof_q8_pick.py PROFILE_DECODE_ARGS..."""

import json
import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv

path = os.environ.get("Q8_PICK")
pick = json.load(open(path)) if path else "table"
if pick != "table":
    gguf_gemv.FMA_CONFIG["Q8_0"] = tuple(pick)
    print(f"Q8_0 config {tuple(pick)}", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
