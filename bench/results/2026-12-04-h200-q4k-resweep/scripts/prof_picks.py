"""profile_decode with Q4K_INT16X_CONFIGS from PICKS (resweep.py's picks.json) when set."""
import json, os, sys
from kvspill.kernels import gguf_gemv
from kvspill.bench import profile_decode

path = os.environ.get("PICKS")
if path:
    p = json.load(open(path))
    rule = gguf_gemv.Q4K_INT16X_CONFIGS

    def pick(name, rows, k):
        cfg = p[name]["cfg"]
        return tuple(cfg) if cfg != "today" else next(cf for mk, mr, cf in rule if k >= mk and rows >= mr)

    gguf_gemv.Q4K_INT16X_CONFIGS = (
        (8192, 0, pick("down", 4096, 14336)),
        (4096, 65536, pick("lm_head", 128256, 4096)),
        (4096, 16384, pick("gate_up", 28672, 4096)),
        (4096, 6144, pick("qkv", 6144, 4096)),
        (4096, 5120, pick("qk", 5120, 4096)),
        (4096, 0, pick("o", 4096, 4096)),
        (0, 16384, pick("l1b_gate_up", 16384, 2048)),
        (0, 0, pick("l1b_qkv", 3072, 2048)),
    )
    print("PICKS", gguf_gemv.Q4K_INT16X_CONFIGS, flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))
