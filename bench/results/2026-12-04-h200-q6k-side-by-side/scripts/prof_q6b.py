"""profile_decode with q6k_int16x_kernel's config per shape from Q6PICKS (q6sweep.py's q6picks.json) when set."""
import json, os, sys
import triton
from kvspill.kernels import gguf_gemv
from kvspill.bench import profile_decode

path = os.environ.get("Q6PICKS")
if os.environ.get("Q6OLD"):
    sys.path.insert(0, os.path.dirname(__file__))
    from q6sweep2 import old_launch
    gguf_gemv._launch_q6k_int16x = old_launch
    print("Q6_K: the committed kernel", flush=True)
if path:
    p = json.load(open(path))

    def cfg_for(rows, k):
        name = min(p, key=lambda n: abs(SH[n][0] - rows) / SH[n][0] + abs(SH[n][1] - k) / SH[n][1])
        c = p[name]["cfg"]
        if c == "today":
            return gguf_gemv.Q6K_FEW_ROWS_CONFIG if rows < gguf_gemv.Q6K_FEW_ROWS else gguf_gemv.Q6K_INT16X_CONFIG
        return tuple(c)

    SH = {"lm_head": (128256, 4096), "down": (4096, 14336), "v": (1024, 4096), "l1b_lm_head": (128256, 2048), "l1b_down": (2048, 8192)}
    SH = {n: SH[n] for n in p}
    orig = gguf_gemv._launch_q6k_int16x
    seen = {}

    def launch(x, weight, bias, out):
        c = cfg_for(weight.out_features, weight.in_features)
        if (weight.out_features, weight.in_features) not in seen:
            seen[(weight.out_features, weight.in_features)] = c
            print("Q6_K", weight.out_features, weight.in_features, "->", c, flush=True)
        keep = gguf_gemv.Q6K_FEW_ROWS_CONFIG, gguf_gemv.Q6K_INT16X_CONFIG
        gguf_gemv.Q6K_FEW_ROWS_CONFIG = gguf_gemv.Q6K_INT16X_CONFIG = c
        try:
            orig(x, weight, bias, out)
        finally:
            gguf_gemv.Q6K_FEW_ROWS_CONFIG, gguf_gemv.Q6K_INT16X_CONFIG = keep

    gguf_gemv._launch_q6k_int16x = launch
sys.exit(profile_decode.main(sys.argv[1:]))
