"""profile_decode with Q6_K weights of at most 2048 rows (an 8B's v) on V_CFG="chunk,bn,warps" when set."""
import os, sys
from kvspill.kernels import gguf_gemv
from kvspill.bench import profile_decode
cfg = os.environ.get("V_CFG")
if cfg:
    v_cfg = tuple(int(c) for c in cfg.split(","))
    default = gguf_gemv.Q6K_INT16X_CONFIG
    launch6 = gguf_gemv._launch_q6k_int16x
    def per_shape(x, weight, bias, out):
        gguf_gemv.Q6K_INT16X_CONFIG = v_cfg if weight.out_features <= 2048 else default
        return launch6(x, weight, bias, out)
    gguf_gemv._launch_q6k_int16x = per_shape
    print("V_CFG", v_cfg, flush=True)
if os.environ.get("FEW") == "0":
    gguf_gemv.Q6K_FEW_ROWS = 0  # every Q6_K weight on Q6K_INT16X_CONFIG, as before the rule
    print("Q6K_FEW_ROWS 0", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
