"""Per shape of random Llama-3.1-8B Q4_K_M (Q4_K shapes), at TOKENS: the table's config against the
same with direct_x, and direct_x on 64 rows / 4 warps. python direct.py OUT.json TOKENS"""
import dataclasses, json, sys
import torch
from dataclasses import replace
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config

TOKENS = int(sys.argv[2])
SHAPES = [(6144, 4096, 16), (5120, 4096, 16), (4096, 4096, 32), (28672, 4096, 32), (4096, 14336, 16)]
rows, tot = [], {}
for n, k, count in SHAPES:
    ws = _copies(random_weight_cuda("Q4_K", n, k))
    x = torch.randn((TOKENS, k), dtype=torch.bfloat16, device="cuda")
    ref = x.float() @ dequantize_ref(ws[0].data, "Q4_K", k).float().t()
    base = mma_config(ws[0], TOKENS)
    variants = {"table": base, "direct": replace(base, direct_x=True),
                "direct_n64w4": replace(base, block_n=64, num_warps=4, direct_x=True),
                "direct_split2x": replace(base, split_k=min(base.split_k * 2, k // 256), direct_x=True)}
    row = dict(n=n, k=k, count=count, base=dataclasses.asdict(base))
    for name, cfg in variants.items():
        got = quant_matmul_mma(x, ws[0], config=cfg).float()
        err = float((got - ref).abs().max() / ref.abs().max())
        us = time_rotating_us(lambda a, w, c=cfg: quant_matmul_mma(a, w, config=c), ws, x, rep=20)
        row[name] = (round(us, 2), round(err, 5))
        tot[name] = tot.get(name, 0) + count * us
    print(json.dumps(row), flush=True)
    rows.append(row)
    del ws
print("Q4_K step ms:", {k: round(v / 1e3, 3) for k, v in tot.items()})
json.dump(dict(rows=rows, totals_ms={k: v / 1e3 for k, v in tot.items()}), open(sys.argv[1], "w"), indent=1)
