"""profile_decode with Q4K_INT8X_CONFIG from INT8X_CFG="chunk,bn,warps" (KVSPILL_INT8_X decides the kernel)."""
import os, sys
from kvspill.kernels import gguf_gemv
from kvspill.bench import profile_decode
cfg = os.environ.get("INT8X_CFG")
if cfg:
    gguf_gemv.Q4K_INT8X_CONFIG = tuple(int(v) for v in cfg.split(","))
print("INT8_X", os.environ.get("KVSPILL_INT8_X"), "config", gguf_gemv.Q4K_INT8X_CONFIG, flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
