"""Decode attention alone (split stage + merge), head_dim 128, 32 / 8 heads, graph replays over 8
layers' KV: the merge as it was (KVSPILL_MERGE_OLD=1: part_o's load masked by part_lse, one program
a head), the unmasked load alone (KVSPILL_MERGE_WHOLE=1) and the unmasked load with a head's dims
over several programs (neither: merge_dim_block). Needs scripts/merge_switch.diff applied."""

import json
import os
import sys

import torch
import triton.testing

from kvspill.kernels import decode_attention as da

LAYERS, BS, H, KVH, D = 8, 16, 32, 8, 128
VARIANTS = {"old": {"KVSPILL_MERGE_OLD": "1"}, "whole": {"KVSPILL_MERGE_WHOLE": "1"}, "split": {}}


def cache(batch, ctx):
    nb = batch * ctx // BS
    layers = [torch.randn((nb, 2, BS, KVH, D), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    bt = torch.randperm(nb, device="cuda").to(torch.int32).view(batch, ctx // BS).contiguous()
    return layers, bt, torch.full((batch,), ctx, dtype=torch.int32, device="cuda")


def time_variant(name, q, layers, bt, lens, out):
    for key in ("KVSPILL_MERGE_OLD", "KVSPILL_MERGE_WHOLE"):
        os.environ.pop(key, None)
    os.environ.update(VARIANTS[name])

    def step():
        for kv in layers:
            da.paged_decode_attention(q, kv, bt, lens, D**-0.5, out=out)

    step()
    return float(triton.testing.do_bench_cudagraph(step, rep=40, return_mode="median")) * 1e3 / LAYERS


def main():
    for batch, ctx in ((1, 8192), (1, 32768), (8, 2048), (32, 2048)):
        layers, bt, lens = cache(batch, ctx)
        q = torch.randn((batch, H, D), dtype=torch.bfloat16, device="cuda")
        out = (torch.empty_like(q), torch.empty((batch, H), dtype=torch.float32, device="cuda"))
        results = {}
        for name in ("old", "whole", "split") * 2:
            us = time_variant(name, q, layers, bt, lens, out)
            results.setdefault(name, []).append(round(us, 2))
            if name == "split":
                ref = out[0].clone()
            elif name == "old":
                old_o = out[0].clone()
        print(
            json.dumps(
                {
                    "batch": batch,
                    "ctx": ctx,
                    "us_a_layer": results,
                    "equal_to_old": bool(torch.equal(ref, old_o)),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
