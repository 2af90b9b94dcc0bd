"""profile_decode with the one-token int16-x configs of PICKS (pf_sweep's picks.json) when set."""
import json, os, sys
from kvspill.kernels import gguf_gemv
from kvspill.bench import profile_decode

path = os.environ.get("PICKS")
if path:
    p = json.load(open(path))
    rule = gguf_gemv.Q4K_INT16X_CONFIGS

    def pick(key, rows, k):
        cfg = p[key]["cfg"]
        return tuple(cfg) if cfg != "today" else next(cf for mk, mr, cf in rule if k >= mk and rows >= mr)

    gguf_gemv.Q4K_INT16X_CONFIGS = (
        (8192, 0, pick("Q4_K,down", 4096, 14336)),
        (0, 65536, next(cf for mk, mr, cf in rule if 4096 >= mk and 128256 >= mr)),
        (0, 16384, pick("Q4_K,gate_up", 28672, 4096)),
        (0, 6144, pick("Q4_K,qkv", 6144, 4096)),
        (0, 5120, pick("Q4_K,qk", 5120, 4096)),
        (0, 0, pick("Q4_K,o", 4096, 4096)),
    )
    q6 = {n: p[f"Q6_K,{n}"]["cfg"] for n in ("v", "down", "lm_head")}
    q6 = {n: (tuple(v) if v != "today" else gguf_gemv.Q6K_INT16X_CONFIG) for n, v in q6.items()}
    launch6 = gguf_gemv._launch_q6k_int16x

    def per_shape(x, weight, bias, out):
        name = "lm_head" if weight.out_features >= 65536 else ("down" if weight.in_features >= 8192 else "v")
        gguf_gemv.Q6K_INT16X_CONFIG = q6[name]
        return launch6(x, weight, bias, out)

    gguf_gemv._launch_q6k_int16x = per_shape
    print("PICKS Q4_K", gguf_gemv.Q4K_INT16X_CONFIGS, "Q6_K", q6, flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
