"""The 8-token step of random Llama-3.1-8B Q4_K_M, shape by shape: quant_linear as the engine runs
it (today's config) and the words form at other (block_n, split_k), us and GB/s, then the step's
weight time summed by count. python mma_shapes.py OUT.json [TOKENS]"""
import dataclasses, json, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_mma import MmaConfig, mma_config, quant_matmul_mma
from kvspill.kernels.quant_linear import quant_linear

TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
# (type, rows, K, launches a step) of llama-quantize's Q4_K_M on Llama-3.1-8B (32 layers; attn_v
# and ffn_down in Q6_K in 16 of them: q+k then v apart there, qkv one weight elsewhere)
SHAPES = [("Q4_K", 6144, 4096, 16), ("Q4_K", 5120, 4096, 16), ("Q6_K", 1024, 4096, 16), ("Q4_K", 4096, 4096, 32),
          ("Q4_K", 28672, 4096, 32), ("Q4_K", 4096, 14336, 16), ("Q6_K", 4096, 14336, 16), ("Q6_K", 128256, 4096, 1)]
VARIANTS = [MmaConfig(block_n=bn, num_warps=4, split_k=sk, num_stages=3, words=True)
            for bn in (32, 64) for sk in (1, 2, 4, 8, 16)]
rows_out, total_today, total_best = [], 0.0, 0.0
for qtype, n, k, count in SHAPES:
    ws = _copies(random_weight_cuda(qtype, n, k))
    x = torch.randn((TOKENS, k), dtype=torch.bfloat16, device="cuda")
    today = time_rotating_us(lambda a, w: quant_linear(a, w), ws, x, rep=20)
    res = []
    for cfg in VARIANTS:
        if cfg.split_k > k // 256:
            continue
        try:
            us = time_rotating_us(lambda a, w, c=cfg: quant_matmul_mma(a, w, config=c), ws, x, rep=20)
        except Exception as e:  # noqa: BLE001
            print("  ", cfg, type(e).__name__, str(e)[:80]); continue
        res.append((us, dataclasses.asdict(cfg)))
    res.sort(key=lambda r: r[0])
    best = min(today, res[0][0]) if res else today
    total_today += count * today
    total_best += count * best
    cfg_today = mma_config(ws[0], TOKENS)
    row = dict(qtype=qtype, n=n, k=k, count=count, today_us=round(today, 2), today_gbs=round(ws[0].nbytes / today / 1e3),
               today_cfg=dataclasses.asdict(cfg_today) if cfg_today else None,
               best=[(round(u, 2), c["block_n"], c["split_k"]) for u, c in res[:4]])
    print(row, flush=True)
    rows_out.append(row)
    json.dump(dict(rows=rows_out), open(sys.argv[1], "w"), indent=1)  # partial: a timeout keeps the rows so far
    del ws
print(f"{TOKENS} tokens: the step's quantized weights {total_today / 1e3:.3f} ms today, {total_best / 1e3:.3f} ms at each shape's best")
json.dump(dict(rows=rows_out, today_ms=total_today / 1e3, best_ms=total_best / 1e3), open(sys.argv[1], "w"), indent=1)
