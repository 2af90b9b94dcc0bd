"""Run a kvspill module with gguf_gemv.Q6K_INT16X_CONFIG from Q6_CFG="chunk,bn,warps" (unset: off).
    python3 with_q6.py kvspill.bench.profile_decode ARGS...
"""
import os, runpy, sys
from kvspill.kernels import gguf_gemv
cfg = os.environ.get("Q6_CFG")
if cfg:
    gguf_gemv.Q6K_INT16X_CONFIG = tuple(int(v) for v in cfg.split(","))
print("Q6K_INT16X_CONFIG", gguf_gemv.Q6K_INT16X_CONFIG, "KVSPILL_INT16_X", os.environ.get("KVSPILL_INT16_X"), flush=True)
mod = sys.argv[1]
sys.argv = [mod] + sys.argv[2:]
runpy.run_module(mod, run_name="__main__")
