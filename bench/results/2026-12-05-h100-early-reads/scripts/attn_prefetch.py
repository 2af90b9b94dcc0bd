"""Decode attention alone (split stage + merge), head_dim 128, 32/8 heads, graph replays rotating
over 8 layers' KV with PDL as in the engine: num_splits x stage-1 launch configs at 1 x 8K,
1 x 32K and 32 x 2K (where today's 3 splits make 768 programs for 528 slots on 132 SMs: 1.45
waves). Written for call A with the experiment's KVSPILL_KV_PREFETCH (0 / 64 / 128); the landed
kernel reads ahead only with new_kv (kernels/pdl.early_reads), so that loop now times one variant
three times. Not run yet. Output: one JSON row per config (us a layer, GB/s, max |err|)."""
import itertools
import json
import os
import sys

import torch
import triton.testing

from kvspill.kernels import decode_attention as da

LAYERS, BS, H, KVH, D = 8, 16, 32, 8, 128
SHAPES = {(1, 8192): (None, 32, 128), (1, 32768): (None, 128), (32, 2048): (None, 1, 2, 4, 6, 8)}
LAUNCHES = ((64, 4, 2), (64, 4, 3), (32, 4, 2), (128, 8, 2))
PREFETCH = ("0",)
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
    for (batch, ctx), splits_list in SHAPES.items():
        layers, bt, lens = cache(batch, ctx)
        q = torch.randn((batch, H, D), dtype=torch.bfloat16, device="cuda")
        out = (torch.empty_like(q), torch.empty((batch, H), dtype=torch.float32, device="cuda"))
        os.environ["KVSPILL_KV_PREFETCH"] = "0"
        ref = da.paged_decode_attention(q, layers[0], bt, lens, D**-0.5)[0].float()
        for pf, launch, splits in itertools.product(PREFETCH, LAUNCHES, splits_list):
            os.environ["KVSPILL_KV_PREFETCH"] = pf
            da._launch_config = lambda head_dim, is_cuda, launch=launch: launch
            try:
                got = da.paged_decode_attention(q, layers[0], bt, lens, D**-0.5, num_splits=splits)[0].float()
                err = float((got - ref).abs().max())
                us = time_one(q, layers, bt, lens, out, splits)
            except Exception as e:  # noqa: BLE001 - a config that fails is a row, not the end
                us, err = float("nan"), str(e)[:100]
            gbs = batch * ctx * KVH * D * 2 * 2 / us / 1e3
            rows.append(dict(batch=batch, ctx=ctx, prefetch=pf, launch=launch, splits=splits, us=round(us, 2), gbs=round(gbs), err=err))
            print(json.dumps(rows[-1]), flush=True)
        del layers
        torch.cuda.empty_cache()
        sel = [r for r in rows if r["batch"] == batch and r["ctx"] == ctx and r["us"] == r["us"]]
        today = next(r for r in sel if tuple(r["launch"]) == today_launch and r["splits"] is None and r["prefetch"] == "0")
        best = sorted(sel, key=lambda r: r["us"])[:4]
        print(f"SUMMARY b{batch} {ctx}: today {today['us']} us {today['gbs']} GB/s | best " +
              "; ".join(f"pf{r['prefetch']} {r['launch']} s{r['splits']} {r['us']} us {r['gbs']} GB/s err {r['err']}" for r in best), flush=True)
        json.dump(rows, open(out_path, "w"))  # after each shape: a timeout keeps the shapes done


if __name__ == "__main__":
    main(sys.argv[1])
