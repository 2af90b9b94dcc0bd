"""Words-form mma kernel: one accumulator chain (today) against two (KVSPILL_MMA_TWO_ACC=1), today's
table config per shape, random Llama-3.1-8B Q4_K_M shapes. python acc_ab.py OUT.json TOKENS..."""
import json, os, sys, time
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config, for_shape
from dataclasses import replace

SHAPES = [("Q4_K", 6144, 4096, 16), ("Q4_K", 5120, 4096, 16), ("Q6_K", 1024, 4096, 16), ("Q4_K", 4096, 4096, 32),
          ("Q4_K", 28672, 4096, 32), ("Q4_K", 4096, 14336, 16), ("Q6_K", 4096, 14336, 16), ("Q6_K", 128256, 4096, 1)]
out = []
t0 = time.time()
for qtype, n, k, count in SHAPES:
    ws = _copies(random_weight_cuda(qtype, n, k))
    for tokens in [int(a) for a in sys.argv[2:]]:
        x = torch.randn((tokens, k), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ dequantize_ref(ws[0].data, qtype, k).float().t()
        cfg = mma_config(ws[0], tokens)
        variants = [("one", cfg, "0"), ("two", cfg, "1")]
        if qtype == "Q4_K" and n > 8192 and tokens > 16:
            variants += [("one_split1", replace(cfg, split_k=1), "0")]
        if qtype == "Q6_K":
            variants += [("two_st2", replace(cfg, num_stages=2), "1"), ("one_st2", replace(cfg, num_stages=2), "0")]
        row = dict(qtype=qtype, n=n, k=k, count=count, tokens=tokens, split=cfg.split_k, bn=cfg.block_n)
        for name, c, two in variants:
            os.environ["KVSPILL_MMA_TWO_ACC"] = two
            got = quant_matmul_mma(x, ws[0], config=c).float()
            err = float((got - ref).abs().max() / ref.abs().max())
            us = min(time_rotating_us(lambda a, w, c=c: quant_matmul_mma(a, w, config=c), ws, x, rep=20) for _ in range(2))
            row[name] = round(us, 2); row[name + "_err"] = round(err, 5)
        os.environ["KVSPILL_MMA_TWO_ACC"] = "0"
        print(json.dumps(row), flush=True)
        out.append(row)
    del ws
json.dump(out, open(sys.argv[1], "w"), indent=1)
for tokens in [int(a) for a in sys.argv[2:]]:
    rows = [r for r in out if r["tokens"] == tokens]
    tot = {v: round(sum(r[v] * r["count"] for r in rows if v in r), 1) for v in ("one", "two")}
    print("tokens", tokens, "step weights us (count-weighted):", tot, "elapsed", round(time.time() - t0))
