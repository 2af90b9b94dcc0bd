"""Run a module with per-shape 8-token mma configs from mma_shapes.py's JSON (a pick only where it
beat today's config by 3%+): with_mma_picks.py PICKS.json MODULE args"""
import json, runpy, sys
from kvspill.kernels import gguf_mma, quant_linear
from kvspill.kernels.triton_compat import triton

rows = json.load(open(sys.argv[1]))["rows"]
picks = {}
for r in rows:
    if r["best"] and r["best"][0][0] < 0.97 * r["today_us"]:
        us, bn, sk = r["best"][0]
        picks[(r["qtype"], r["n"], r["k"])] = gguf_mma.MmaConfig(block_n=bn, num_warps=4, split_k=sk, num_stages=3, words=True)
print("mma picks:", {k: (v.block_n, v.split_k) for k, v in picks.items()}, flush=True)
default = gguf_mma.mma_config


def mma_config(weight, num_tokens):
    cfg = default(weight, num_tokens)
    if cfg is None or triton.next_power_of_2(num_tokens) != int(__import__("os").environ.get("PICK_TOKENS", "8")):
        return cfg
    return picks.get((weight.qtype, weight.out_features, weight.in_features), cfg)


gguf_mma.mma_config = mma_config
quant_linear.mma_config = mma_config
sys.argv = [sys.argv[2]] + sys.argv[3:]
runpy.run_module(sys.argv[0], run_name="__main__")
