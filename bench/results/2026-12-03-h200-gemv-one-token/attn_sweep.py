"""Decode attention at batch 1/4/8, 8K/32K, head_dim 128 (32/8 heads): min_split_tokens x stage-1 launch
configs, graph replays rotating over 8 layers' KV (a layer at 8K, 33.5 MB, fits the H200's 60 MB L2)."""
import json, sys, itertools
import torch
import triton.testing
from kvspill.kernels import decode_attention as da

LAYERS, BS, H, KVH, D = 8, 16, 32, 8, 128
MIN_SPLITS = (64, 128, 256, 512)
LAUNCHES = ((64, 4, 2), (32, 4, 2), (64, 4, 3), (32, 2, 3), (128, 8, 2), (64, 8, 2), (32, 4, 3))


def cache(batch, ctx):
    nb = batch * ctx // BS
    layers = [torch.randn((nb, 2, BS, KVH, D), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    bt = torch.randperm(nb, device="cuda").to(torch.int32).view(batch, ctx // BS).contiguous()
    return layers, bt, torch.full((batch,), ctx, dtype=torch.int32, device="cuda")


def main(out_path):
    rows = []
    for batch, ctx in itertools.product((1, 4, 8), (8192, 32768)):
        layers, bt, lens = cache(batch, ctx)
        q = torch.randn((batch, H, D), dtype=torch.bfloat16, device="cuda")
        out = (torch.empty_like(q), torch.empty((batch, H), dtype=torch.float32, device="cuda"))
        ref = da.paged_decode_attention(q, layers[0], bt, lens, D ** -0.5)[0].float()
        for launch in LAUNCHES:
            da._launch_config = lambda head_dim, is_cuda, launch=launch: launch
            for ms_tok in MIN_SPLITS:
                def step():
                    for kv in layers:
                        da.paged_decode_attention(q, kv, bt, lens, D ** -0.5, out=out, min_split_tokens=ms_tok)
                try:
                    got = da.paged_decode_attention(q, layers[0], bt, lens, D ** -0.5, min_split_tokens=ms_tok)[0].float()
                    err = float((got - ref).abs().max())
                    us = float(triton.testing.do_bench_cudagraph(step, rep=30, return_mode="median")) * 1e3 / LAYERS
                except Exception as e:  # noqa
                    us, err = float("nan"), str(e)[:100]
                gbs = batch * ctx * KVH * D * 2 * 2 / us / 1e3
                rows.append(dict(batch=batch, ctx=ctx, launch=launch, min_split=ms_tok, us=round(us, 2), gbs=round(gbs), err=err))
        del layers
        torch.cuda.empty_cache()
    json.dump(rows, open(out_path, "w"))
    for batch, ctx in itertools.product((1, 4, 8), (8192, 32768)):
        sel = [r for r in rows if r["batch"] == batch and r["ctx"] == ctx and r["us"] == r["us"]]
        today = next(r for r in sel if r["launch"] == (64, 4, 2) and r["min_split"] == 256)
        best = sorted(sel, key=lambda r: r["us"])[:3]
        print(f"b{batch} {ctx}: today {today['us']} us {today['gbs']} GB/s | best " +
              "; ".join(f"{r['launch']} ms{r['min_split']} {r['us']} us {r['gbs']} GB/s err {r['err']:.2g}" for r in best))


if __name__ == "__main__":
    main(sys.argv[1])
