"""Decode attention, split merge fused into the split kernel vs a second merge kernel, on a CUDA GPU.

Run from the repo root:  PYTHONPATH=$PWD python3 .devbench/s35/attn_fused.py  [--forms ...] [--replays N]

For Llama-3.2-1B (32/8 heads, head_dim 64) and Llama-3.1-8B (32/8, 128) attention shapes, bf16,
block_size 16, contexts 2048/8192/32768, batch 1 and 8: a paged pool of L layers (engine layout:
[num_blocks, L, 2, block_size, kv_heads, head_dim], shuffled block table shared by the layers), L = 8
or more, so that one pass over the layers reads >= 4x the H200's 60 MB L2 (small contexts need more
than 8 layers for that). One CUDA graph per form runs paged_decode_attention over all L layers
(automatic num_splits, as the engine); it is replayed --replays times (in 5 trials) and each
JSON line gives the median and best us per call (graph time / L) and GB/s of KV read.

Forms: "fused" (fused_merge=True, the default chunk), "fused_c64" (fused, the merge loading up to 64
splits at a time instead of the 32-registers-a-thread default: fewer L2 round trips for the last
program, more registers), "separate" (fused_merge=False: split kernel + merge kernel).

Checks printed per config: max |o| difference of each fused form against "separate" (eager, layer
0; fp32 rounding of the merge order, then bf16), of the graph's last replayed layer against an eager
call of the same form, of fused against the torch reference on layer 0, and whether the arrival
counters are all zero after the replays.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics

import torch

from kvspill.bench.kernels_attention import BLOCK_SIZE, DTYPE, SHAPES, _copy_ceiling_gbps
from kvspill.kernels import decode_attention as da
from kvspill.kernels.pdl import pdl_enabled

L2_BYTES = 60 * 2**20
FORMS = ("fused", "fused_c64", "separate")


def build_pool(batch: int, ctx: int, num_kv_heads: int, head_dim: int):
    """(layer views, block_tables, seq_lens): enough layers that one pass reads >= 4x L2."""
    blocks_per_seq = ctx // BLOCK_SIZE
    num_blocks = batch * blocks_per_seq
    layer_bytes = num_blocks * 2 * BLOCK_SIZE * num_kv_heads * head_dim * DTYPE.itemsize
    num_layers = max(8, math.ceil(4 * L2_BYTES / layer_bytes))
    pool = torch.randn(
        (num_blocks, num_layers, 2, BLOCK_SIZE, num_kv_heads, head_dim), dtype=DTYPE, device="cuda"
    )
    ids = torch.randperm(num_blocks, device="cuda").to(torch.int32)
    block_tables = ids.view(batch, blocks_per_seq).contiguous()
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    return [pool[:, layer] for layer in range(num_layers)], block_tables, seq_lens


@contextlib.contextmanager
def _merge_chunk_cap(form: str):
    """fused_c64: the fused merge loads up to 64 splits at a time (da._merge_chunk patched)."""
    real = da._merge_chunk
    if form == "fused_c64":
        da._merge_chunk = lambda head_dim, num_warps, num_splits, is_cuda: min(
            64, da.triton.next_power_of_2(num_splits)
        )
    try:
        yield
    finally:
        da._merge_chunk = real


def run_form(form, q, layers, block_tables, seq_lens, scale, out, replays):
    """Eager warm-up (compiles, sizes the counters), capture over all layers, timed replays."""
    fused = form != "separate"

    def step():
        for kv in layers:
            da.paged_decode_attention(q, kv, block_tables, seq_lens, scale, out=out, fused_merge=fused)

    with _merge_chunk_cap(form):
        eager0 = [
            t.clone()
            for t in da.paged_decode_attention(q, layers[0], block_tables, seq_lens, scale, fused_merge=fused)
        ]
        step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()
        trials, per_trial = 5, max(1, replays // 5)
        times = []
        for _ in range(trials):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(per_trial):
                graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / (per_trial * len(layers)))  # us per call
        last_eager = da.paged_decode_attention(
            q, layers[-1], block_tables, seq_lens, scale, fused_merge=fused
        )
        graph_vs_eager = float((out[0].float() - last_eager[0].float()).abs().max())
    counters = da._COUNTERS.get(q.device)
    counters_zero = None if counters is None else bool((counters == 0).all())
    del graph
    return statistics.median(times), min(times), eager0, graph_vs_eager, counters_zero


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS))
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192, 32768])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--replays", type=int, default=200)
    args = parser.parse_args()
    dev = torch.device("cuda", torch.cuda.current_device())
    num_sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(dev),
                "torch": torch.__version__,
                "triton": __import__("triton").__version__,
                "pdl": pdl_enabled(dev),
                "copy_ceiling_gbps": round(_copy_ceiling_gbps()),
            }
        ),
        flush=True,
    )
    for name, (num_heads, num_kv_heads, head_dim) in SHAPES.items():
        for ctx in args.contexts:
            for batch in args.batches:
                layers, block_tables, seq_lens = build_pool(batch, ctx, num_kv_heads, head_dim)
                gen = torch.Generator(device="cuda").manual_seed(0)
                q = torch.randn((batch, num_heads, head_dim), generator=gen, device="cuda").to(DTYPE)
                out = (
                    torch.empty_like(q),
                    torch.empty((batch, num_heads), dtype=torch.float32, device="cuda"),
                )
                scale = head_dim**-0.5
                min_split = da.triton.cdiv(da.default_min_split_tokens(head_dim), 64) * 64
                splits = da.choose_num_splits(
                    block_tables.shape[1] * BLOCK_SIZE, batch, num_kv_heads, num_sms, min_split
                )
                kv_bytes = batch * ctx * num_kv_heads * head_dim * 2 * DTYPE.itemsize
                o_ref = da.paged_decode_attention_ref(q, layers[0], block_tables, seq_lens, scale)[0]
                results = {}
                for form in args.forms:
                    try:
                        results[form] = run_form(
                            form, q, layers, block_tables, seq_lens, scale, out, args.replays
                        )
                    except Exception as exc:  # noqa: BLE001 - report and go on with the other forms
                        print(
                            json.dumps(
                                {
                                    "shape": name,
                                    "ctx": ctx,
                                    "batch": batch,
                                    "form": form,
                                    "error": repr(exc)[:300],
                                }
                            ),
                            flush=True,
                        )
                for form, (us, us_min, eager0, graph_vs_eager, counters_zero) in results.items():
                    row = {
                        "shape": name,
                        "head_dim": head_dim,
                        "ctx": ctx,
                        "batch": batch,
                        "form": form,
                        "num_splits": splits,
                        "layers": len(layers),
                        "us": round(us, 2),
                        "us_min": round(us_min, 2),
                        "gbps": round(kv_bytes / us / 1e3),
                        "graph_vs_eager_max_abs": graph_vs_eager,
                        "vs_ref_max_abs": float((eager0[0].float() - o_ref.float()).abs().max()),
                    }
                    if form != "separate":
                        row["counters_zero"] = counters_zero
                        if "separate" in results:
                            sep = results["separate"][2]
                            row["vs_separate_o_max_abs"] = float(
                                (eager0[0].float() - sep[0].float()).abs().max()
                            )
                            lse_ok = torch.isfinite(sep[1])
                            row["vs_separate_lse_max_abs"] = float((eager0[1] - sep[1])[lse_ok].abs().max())
                    print(json.dumps(row), flush=True)
                del layers, block_tables, seq_lens, q, out, results
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
