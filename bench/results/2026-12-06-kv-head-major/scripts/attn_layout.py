"""Decode attention alone (split stage + merge, today's splits and tiles) on the KV pool's layout
[block, K/V, slot, head, dim] against a head-major block [block, K/V, head, slot, dim], handed to
the same kernels as a permuted view (they take the pool's strides). Block sizes 16 (today), 32, 64
head-major. Graph replays rotating over 8 layers' KV; W1 (head_dim 64) and 8B (128) shapes at
1 x 8K, 8 x 2K, 32 x 2K.

Why: at batch 1 decode attention runs at about half of HBM bandwidth (8B 8K on an H200: 15.6 us a
layer for 33.5 MB; W1 on an H100 with PDL off: the split kernel 10.7 us for 16.8 MB) where the
GEMVs reach about 78%; in the pool's layout one KV head's rows are 128 / 256-byte runs
num_kv_heads x row bytes apart, head-major makes each block's rows of a head one run.
Usage: python3 attn_layout.py OUT.json"""

import json
import os
import sys

import torch
import triton.testing

from kvspill.kernels import decode_attention as da

LAYERS = 8
SHAPES = {"w1": (32, 8, 64), "8b": (32, 8, 128)}  # heads, kv heads, head_dim
BATCHES = ((1, 8192), (8, 2048), (32, 2048))
LAYOUTS = (("pool", 16), ("head_major", 16), ("head_major", 32), ("head_major", 64), ("pool", 64))
# The fixed-cost check: batch 1 on the pool's layout over contexts, the KV rotating over 8 layers
# (from HBM) or one layer replayed 8 times (from L2 where it fits): a line us = fixed + MB / rate
# through the HBM rows tells the launches' and merge's fixed cost from the reads' rate, and L2
# rows as slow as HBM ones say the kernel waits on something other than HBM; PDL off (HBM) shows
# what the launches' overlap takes off the fixed cost.
FIXED_COST_CTXS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


def kv_layer(layout, nb, bs, kvh, d):
    """A layer of nb blocks as the kernels see it, [nb, 2, bs, kvh, d], in either memory order."""
    if layout == "pool":
        return torch.randn((nb, 2, bs, kvh, d), dtype=torch.bfloat16, device="cuda")
    stored = torch.randn((nb, 2, kvh, bs, d), dtype=torch.bfloat16, device="cuda")
    return stored.permute(0, 1, 3, 2, 4)


def time_layers(q, layers, bt, lens, out, scale):
    def step():
        for kv in layers:
            da.paged_decode_attention(q, kv, bt, lens, scale, out=out)

    return float(triton.testing.do_bench_cudagraph(step, rep=40, return_mode="median")) * 1e3 / LAYERS


def one_row(shape, batch, ctx, layout, bs, from_l2=False):
    heads, kvh, d = SHAPES[shape]
    nb = batch * ctx // bs
    if from_l2:
        layers = [kv_layer(layout, nb, bs, kvh, d)] * LAYERS
    else:
        layers = [kv_layer(layout, nb, bs, kvh, d) for _ in range(LAYERS)]
    bt = torch.randperm(nb, device="cuda").to(torch.int32).view(batch, ctx // bs).contiguous()
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn((batch, heads, d), dtype=torch.bfloat16, device="cuda")
    out = (torch.empty_like(q), torch.empty((batch, heads), dtype=torch.float32, device="cuda"))
    scale = d**-0.5
    got = da.paged_decode_attention(q, layers[0], bt, lens, scale)[0]
    ref = da.paged_decode_attention(q, layers[0].contiguous(), bt, lens, scale)[0]  # pool order
    us = time_layers(q, layers, bt, lens, out, scale)
    mb = batch * ctx * kvh * d * 2 * 2 / 1e6
    return dict(
        shape=shape,
        batch=batch,
        ctx=ctx,
        layout=layout,
        block_size=bs,
        reads="l2" if from_l2 else "hbm",
        pdl=os.environ.get("KVSPILL_PDL", "1") != "0",
        us=round(us, 2),
        gbs=round(mb / us * 1e3),
        equal_to_pool_order=bool(torch.equal(got, ref)),
    )


def fixed_cost_rows(rows, out_path):
    for shape in SHAPES:
        for ctx in FIXED_COST_CTXS:
            for from_l2, pdl in ((False, "1"), (True, "1"), (False, "0")):
                os.environ["KVSPILL_PDL"] = pdl  # read per call (kernels/pdl.pdl_enabled)
                row = one_row(shape, 1, ctx, "pool", 16, from_l2)
                rows.append(row)
                print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
        os.environ["KVSPILL_PDL"] = "1"
        json.dump(rows, open(out_path, "w"))


def layout_rows(rows, out_path):
    for shape in SHAPES:
        for batch, ctx in BATCHES:
            for layout, bs in LAYOUTS:
                try:
                    row = one_row(shape, batch, ctx, layout, bs)
                except Exception as e:  # noqa: BLE001 - a failing layout is a row, not the end
                    row = dict(
                        shape=shape, batch=batch, ctx=ctx, layout=layout, block_size=bs, error=str(e)[:120]
                    )
                rows.append(row)
                print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
            json.dump(rows, open(out_path, "w"))  # after each shape: a timeout keeps the rows done


def main(out_path):
    rows = []
    fixed_cost_rows(rows, out_path)  # first since 2026-12-07: the question the older data left
    layout_rows(rows, out_path)


if __name__ == "__main__":
    main(sys.argv[1])
