"""Words-form configs against today's path at token counts the sweep left out (2, 32, 64)."""
import json, sys
from kvspill.bench.mma_sweep import Bench
from kvspill.bench.kernels_gguf import SHAPES
from kvspill.kernels.gguf_mma import MmaConfig
qtype = sys.argv[1]
tokens = [int(t) for t in sys.argv[2].split(",")]
cfgs = [MmaConfig(block_n=64, num_warps=4, split_k=4, num_stages=3, words=True),
        MmaConfig(block_n=128, num_warps=8, split_k=4, num_stages=3, words=True),
        MmaConfig(block_n=64, num_warps=4, split_k=2, num_stages=3, words=True)]
b = Bench()
for t in tokens:
    sums = {"today": 0.0, **{i: 0.0 for i in range(len(cfgs))}}
    for shape in SHAPES:
        today = b.today(qtype, shape, t)
        runs = [b.mma(qtype, shape, t, c) for c in cfgs]
        print(json.dumps(dict(qtype=qtype, t=t, shape=shape, today=today, words=[{k: r.get(k) for k in ("us", "pct", "err", "rel_err")} for r in runs])), flush=True)
        sums["today"] += today["us"]
        for i, r in enumerate(runs):
            sums[i] += r.get("us", float("inf"))
    print("SUM", qtype, t, {k: round(v, 1) for k, v in sums.items()}, flush=True)
