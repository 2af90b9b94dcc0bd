"""profile_decode with the split lm_head's one-token config from LM_HEAD_PICK (lm_head_sweep.py's
pick file) put first in Q6K_INT16X_SPLIT_CONFIGS for weights of 65,536 rows and up; unset or
"table": as shipped.   python3 prof_lm_head.py PROFILE_DECODE_ARGS..."""

import json
import os
import sys

from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv

path = os.environ.get("LM_HEAD_PICK")
pick = json.load(open(path)) if path else "table"
if pick != "table":
    gguf_gemv.Q6K_INT16X_SPLIT_CONFIGS = ((0, 65536, tuple(pick)),) + gguf_gemv.Q6K_INT16X_SPLIT_CONFIGS
    print(f"lm_head config {tuple(pick)}", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
