"""profile_decode with the one-token Q4_K GEMV replaced by a q4k16 variant: prof_with.py VARIANT|old ARGS..."""
import json, sys
sys.path.insert(0, ".devbench")
variant = sys.argv[1]
if variant != "old":
    v = json.load(open(variant))["best"] if variant.endswith(".json") else json.loads(variant)
    from kvspill.kernels import gguf_gemv
    sys.path.insert(0, ".devbench")
    from sweep16 import run
    orig = gguf_gemv._launch_lane_kernel

    def patched(x, weight, bias, out, config):
        if weight.qtype == "Q4_K" and x.shape[0] == 1 and bias is None:
            run(x, weight, v, out=out)
        else:
            orig(x, weight, bias, out, config)
    gguf_gemv._launch_lane_kernel = patched
    print("variant", v)
from kvspill.bench import profile_decode
sys.exit(profile_decode.main(sys.argv[2:]))
