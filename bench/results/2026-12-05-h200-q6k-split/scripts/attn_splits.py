"""Decode attention (split stage + merge) at batch 1 x 8K and 8 / 32 x 2K, head_dim 128 (32/8 heads):
num_splits (None: today's choose_num_splits) x stage-1 launch configs, graph replays rotating over 8
layers' KV. Why: 32 x 2K is the farthest bar (1.61x of 2x llama-batched-bench) and no sweep covered
batches above 8 (bench/results/2026-12-03-h200-gemv-one-token/attn_sweep.py: 1 / 4 / 8)."""
import itertools
import json
import sys

import torch
import triton.testing

from kvspill.kernels import decode_attention as da

LAYERS, BS, H, KVH, D = 8, 16, 32, 8, 128
SPLITS = (None, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
LAUNCHES = ((64, 4, 2), (32, 4, 2), (64, 4, 3), (64, 8, 2), (128, 8, 2), (32, 2, 3))
today_launch = da._launch_config(D, True)


def cache(batch, ctx):
    nb = batch * ctx // BS
    layers = [torch.randn((nb, 2, BS, KVH, D), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    bt = torch.randperm(nb, device="cuda").to(torch.int32).view(batch, ctx // BS).contiguous()
    return layers, bt, torch.full((batch,), ctx, dtype=torch.int32, device="cuda")


def time_one(q, layers, bt, lens, out, splits):
    def step():
        for kv in layers:
            da.paged_decode_attention(q, kv, bt, lens, D**-0.5, num_splits=splits, out=out)

    return float(triton.testing.do_bench_cudagraph(step, rep=30, return_mode="median")) * 1e3 / LAYERS


def main(out_path):
    rows = []
    for batch, ctx in ((1, 8192), (8, 2048), (32, 2048)):
        layers, bt, lens = cache(batch, ctx)
        q = torch.randn((batch, H, D), dtype=torch.bfloat16, device="cuda")
        out = (torch.empty_like(q), torch.empty((batch, H), dtype=torch.float32, device="cuda"))
        ref = da.paged_decode_attention(q, layers[0], bt, lens, D**-0.5)[0].float()
        for launch, splits in itertools.product(LAUNCHES, SPLITS):
            if splits is not None and splits * 64 > ctx:
                continue
            da._launch_config = lambda head_dim, is_cuda, launch=launch: launch
            try:
                got = da.paged_decode_attention(q, layers[0], bt, lens, D**-0.5, num_splits=splits)[0].float()
                err = float((got - ref).abs().max())
                us = time_one(q, layers, bt, lens, out, splits)
            except Exception as e:  # noqa: BLE001 - a config that fails is a row, not the end
                us, err = float("nan"), str(e)[:100]
            gbs = batch * ctx * KVH * D * 2 * 2 / us / 1e3
            rows.append(dict(batch=batch, ctx=ctx, launch=launch, splits=splits, us=round(us, 2), gbs=round(gbs), err=err))
        del layers
        torch.cuda.empty_cache()
        sel = [r for r in rows if r["batch"] == batch and r["ctx"] == ctx and r["us"] == r["us"]]
        today = next(r for r in sel if tuple(r["launch"]) == today_launch and r["splits"] is None)
        best = sorted(sel, key=lambda r: r["us"])[:4]
        print(f"b{batch} {ctx}: today {today['us']} us {today['gbs']} GB/s | best " +
              "; ".join(f"{r['launch']} s{r['splits']} {r['us']} us {r['gbs']} GB/s err {r['err']}" for r in best), flush=True)
        json.dump(rows, open(out_path, "w"))  # after each shape: a timeout keeps the shapes done


if __name__ == "__main__":
    main(sys.argv[1])
