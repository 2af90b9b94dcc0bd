"""Tensor-core words form: mma.sync (num_warps 2) and 8-token tiles against today's wgmma 64 x 4
warps with 16-token tiles, per shape of random Llama-3.1-8B Q4_K_M. python mma_v2.py OUT.json TOKENS"""
import dataclasses, json, sys, time
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_mma as gm
from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.kernels.gguf_mma import MmaConfig, quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import for_shape, MMA_CONFIGS
from kvspill.kernels.quant_linear import quant_linear
from kvspill.kernels.triton_compat import triton

TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
SHAPES = [("Q4_K", 6144, 4096, 16), ("Q4_K", 5120, 4096, 16), ("Q6_K", 1024, 4096, 16), ("Q4_K", 4096, 4096, 32),
          ("Q4_K", 28672, 4096, 32), ("Q4_K", 4096, 14336, 16), ("Q6_K", 4096, 14336, 16), ("Q6_K", 128256, 4096, 1)]
VARIANTS = [("v3t16", 64, 4, 16), ("v3t8", 64, 4, 8), ("v2n32", 32, 2, 8), ("v2n64", 64, 2, 8), ("v2n16w1", 16, 1, 8)]
T16 = gm.mma_t_pad

def tpad_fn(tmin):
    return lambda n: max(tmin, triton.next_power_of_2(n))

def splits(qtype, n, k, name):
    fallback = MmaConfig(block_n=32, num_warps=2, split_k=16 if qtype == "Q6_K" else 8, num_stages=3, words=True, sb_per_split=1 if qtype == "Q6_K" else 4)
    base = MMA_CONFIGS.get((qtype, triton.next_power_of_2(TOKENS)), fallback)
    rule = for_shape(base, n, k).split_k
    sbs = k // 256
    if n > 8192:
        return [1, 2]
    cand = {rule, rule * 2} | ({max(1, rule // 2)} if name.startswith("v2") else set())
    return sorted(s for s in cand if s <= sbs)

rows_out = []
t0 = time.time()
for qtype, n, k, count in SHAPES:
    ws = _copies(random_weight_cuda(qtype, n, k))
    x = torch.randn((TOKENS, k), dtype=torch.bfloat16, device="cuda")
    gm.mma_t_pad = tpad_fn(16)
    today = time_rotating_us(lambda a, w: quant_linear(a, w), ws, x, rep=20)
    ref = x.float() @ dequantize_ref(ws[0].data, qtype, k).float().t()
    res = []
    for name, bn, nw, tmin in VARIANTS:
        gm.mma_t_pad = tpad_fn(tmin)
        for sk in splits(qtype, n, k, name):
            cfg = MmaConfig(block_n=bn, num_warps=nw, split_k=sk, num_stages=3, words=True)
            try:
                got = quant_matmul_mma(x, ws[0], config=cfg).float()
                err = float((got - ref).abs().max() / ref.abs().max())
                us = time_rotating_us(lambda a, w, c=cfg: quant_matmul_mma(a, w, config=c), ws, x, rep=20)
            except Exception as e:  # noqa: BLE001
                print("  ", name, sk, type(e).__name__, str(e)[:120], flush=True); continue
            res.append(dict(us=round(us, 2), name=name, bn=bn, nw=nw, tmin=tmin, split=sk, err=round(err, 5)))
    res.sort(key=lambda r: r["us"])
    row = dict(qtype=qtype, n=n, k=k, count=count, today_us=round(today, 2), gbs_today=round(ws[0].nbytes / today / 1e3),
               best=res[:3], by_variant={v[0]: min((r["us"] for r in res if r["name"] == v[0]), default=None) for v in VARIANTS},
               worst_err=max((r["err"] for r in res), default=None), elapsed=round(time.time() - t0))
    print(json.dumps(row), flush=True)
    rows_out.append(row)
    json.dump(dict(rows=rows_out, tokens=TOKENS), open(sys.argv[1], "w"), indent=1)
    del ws
gm.mma_t_pad = T16
tot = {v[0]: sum(r["count"] * (r["by_variant"][v[0]] or r["today_us"]) for r in rows_out) / 1e3 for v in VARIANTS}
tot["today"] = sum(r["count"] * r["today_us"] for r in rows_out) / 1e3
tot["best"] = sum(r["count"] * min(r["today_us"], r["best"][0]["us"] if r["best"] else 1e9) for r in rows_out) / 1e3
print(f"{TOKENS} tokens: step's quantized weights ms per variant (its best split per shape):", json.dumps(tot))
json.dump(dict(rows=rows_out, tokens=TOKENS, totals=tot), open(sys.argv[1], "w"), indent=1)
