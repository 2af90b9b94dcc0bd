"""profile_decode with MIXED_Q6K_CONFIGS[WARPS] = (CHUNK, BLOCK_N):
python with_config.py WARPS CHUNK BLOCK_N -- PROFILE_DECODE_ARGS"""

import runpy
import sys

from kvspill.kernels import gguf_gemv_mixed

warps, chunk, block_n = (int(v) for v in sys.argv[1:4])
gguf_gemv_mixed.MIXED_Q6K_CONFIGS[warps] = (chunk, block_n)
sys.argv = ["profile_decode", *sys.argv[5:]]
runpy.run_module("kvspill.bench.profile_decode", run_name="__main__")
