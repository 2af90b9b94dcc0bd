"""Decode attention's fixed cost taken apart (batch 1, pool layout, KV rotating over 8 layers):
split stage alone, merge alone, both, at 512-32K keys, W1 and 8B shapes, PDL on.
Usage: python3 split_merge.py OUT.json"""

import json
import sys

import torch
import triton.testing

from kvspill.kernels import decode_attention as da

LAYERS = 8
SHAPES = {"w1": (32, 8, 64), "8b": (32, 8, 128)}


def bench(fn):
    return float(triton.testing.do_bench_cudagraph(fn, rep=40, return_mode="median")) * 1e3 / LAYERS


def rows_for(shape, ctx):
    heads, kvh, d = SHAPES[shape]
    bs = 16
    nb = ctx // bs
    layers = [torch.randn((nb, 2, bs, kvh, d), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    bt = torch.randperm(nb, device="cuda").to(torch.int32).view(1, nb).contiguous()
    lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn((1, heads, d), dtype=torch.bfloat16, device="cuda")
    o, lse = torch.empty_like(q), torch.empty((1, heads), dtype=torch.float32, device="cuda")
    launch = da._launch_config(d, True, 1)
    mst = da.default_min_split_tokens(d)
    mst = -(-mst // launch[0]) * launch[0]
    splits = da._auto_num_splits(q, layers[0], bt, mst)
    po = q.new_empty((1, heads, splits, d), dtype=torch.float32)
    pl = q.new_empty((1, heads, splits), dtype=torch.float32)
    scale = d**-0.5

    def split_only():
        for kv in layers:
            da._launch_split_stage(q, kv, bt, lens, scale, po, pl, mst, launch, None)

    def merge_only():
        for _ in layers:
            da._merge_splits(po, pl, o, lse)

    def both():
        for kv in layers:
            da.paged_decode_attention(q, kv, bt, lens, scale, out=(o, lse))

    mb = ctx * kvh * d * 4 / 1e6
    out = dict(shape=shape, ctx=ctx, splits=splits, mb=round(mb, 2))
    for name, fn in (("split", split_only), ("merge", merge_only), ("both", both)):
        out[name] = round(bench(fn), 2)
    return out


def main(path):
    rows = []
    for shape in SHAPES:
        for ctx in (512, 2048, 8192, 32768):
            r = rows_for(shape, ctx)
            rows.append(r)
            print(json.dumps(r), flush=True)
            torch.cuda.empty_cache()
    json.dump(rows, open(path, "w"))


if __name__ == "__main__":
    main(sys.argv[1])
