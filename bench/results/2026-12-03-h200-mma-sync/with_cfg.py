"""Run a module with the token-tile minimum TMIN (env, default 8) and, with PICKS=file.json (mma_v2.py's
output), each shape's best variant at that JSON's token count: with_cfg.py MODULE args"""
import json, os, runpy, sys
from kvspill.kernels import gguf_mma, quant_linear, gguf_mma_configs
from kvspill.kernels.triton_compat import triton

tmin = int(os.environ.get("TMIN", "8"))
gguf_mma.mma_t_pad = lambda n: max(tmin, triton.next_power_of_2(n))
picks, tokens = {}, 0
if os.environ.get("PICKS"):
    data = json.load(open(os.environ["PICKS"]))
    tokens = data["tokens"]
    for r in data["rows"]:
        b = [x for x in r["best"] if x["tmin"] == tmin]
        if b:
            b = b[0]
            picks[(r["qtype"], r["n"], r["k"])] = gguf_mma_configs.MmaConfig(block_n=b["bn"], num_warps=b["nw"], split_k=b["split"], num_stages=3, words=True)
print("TMIN", tmin, "picks", {k: (v.block_n, v.num_warps, v.split_k) for k, v in picks.items()}, flush=True)
default = gguf_mma_configs.mma_config

def mma_config(weight, num_tokens):
    cfg = default(weight, num_tokens)
    if cfg is None or triton.next_power_of_2(num_tokens) != tokens:
        return cfg
    return picks.get((weight.qtype, weight.out_features, weight.in_features), cfg)

gguf_mma.mma_config = mma_config
quant_linear.mma_config = mma_config
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__")
