"""Engine benchmark with several requests at once: aggregate decode speed against its floor, and
per-request latency percentiles.

    python -m kvspill.bench.concurrent_bench --shape llama-3b --vram-budget 16GiB --cpu-kv-budget 40GiB \
        --ctx 32768 --concurrency 3 --out $OUT/w2_concurrent.jsonl
    python -m kvspill.bench.concurrent_bench --shape llama-3b --vram-budget 16GiB --ctx 512 \
        --concurrency 16 --new-tokens 256 --out $OUT/w2_short.jsonl

All `concurrency` requests (random prompts of `ctx` tokens, `new_tokens` forced outputs) enter
the engine together; continuous batching runs their prefill chunks and decodes in shared steps.

Invariants:
- Aggregate decode tok/s counts only steps in which every request decoded exactly one token and
  every request was past its warm-up tokens: pure all-N decode steps, so it is comparable with the
  floor of N sequences decoding together. Each request's budget is raised by the number of
  mixed steps it could decode in while the others prefill (at the prefill cap the ITL budget
  starts the engine with: its floor, 256 tokens with the mixed-step graphs), so such steps exist
  for every run the KV holds. Beside llama-batched-bench (which prefills every sequence before
  decoding) pass `--target-itl-ms 0`: prefill then takes whole chunks, as there.
- The floor is the placement's: one read of the weights and the hot KV over HBM per step, the
  cold KV (what the gpu tier cannot hold) over pinned H2D; N tokens per step.
- TTFT, ITL and end-to-end latency are per request, from the moment all requests were added;
  percentiles as in `kvspill.bench.loadgen` (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch

from kvspill.bench.engine_bench import GIB, bench_flags, setup_engine
from kvspill.bench.engine_flags import REQUIRED, add_engine_flags, token_count
from kvspill.bench.loadgen import latency_stats
from kvspill.engine.core import LLMEngine
from kvspill.plan.choices import prefill_floor_tokens
from kvspill.sampling_params import SamplingParams


def run_concurrent(engine: LLMEngine, ctx: int, n: int, new_tokens: int, warmup: int, seed: int) -> dict:
    # Steps in which an early request decodes while later ones prefill: its budget grows by them.
    mixed_steps = decode_steps_during_prefill(n, ctx, _prefill_per_step(engine))
    gen = torch.Generator().manual_seed(seed)
    ids = []
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(n):
        prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
        params = SamplingParams(
            temperature=0.0,
            max_tokens=1 + warmup + new_tokens + mixed_steps,
            ignore_eos=True,
            detokenize=False,
        )
        ids.append(engine.add_request(prompt, params))
    times: dict[str, list[float]] = {rid: [] for rid in ids}
    pure_s, pure_tokens = 0.0, 0
    ready = False  # every request past its warm-up tokens before this step
    steps: list[tuple[float, int, int, int | None]] = []
    for step in engine.run():
        prefilling = sum(1 for t in times.values() if not t)
        step_tokens = 0
        for out in step.outputs:
            for _ in out.delta_token_ids:
                times[out.req_id].append(step.end_time)
            step_tokens += len(out.delta_token_ids)
        if ready and step_tokens == n and all(len(out.delta_token_ids) == 1 for out in step.outputs):
            pure_s += step.seconds
            pure_tokens += n
        ready = all(len(t) > warmup for t in times.values())
        steps.append((step.seconds, step_tokens, prefilling, engine.scheduler.prefill_token_cap))
    ttft = [(t[0] - t0) * 1e3 for t in times.values()]
    itl = [(b - a) * 1e3 for t in times.values() for a, b in zip(t, t[1:], strict=False)]
    e2e = [(t[-1] - t0) * 1e3 for t in times.values()]
    total = sum(len(t) for t in times.values())
    wall = max(t[-1] for t in times.values()) - t0
    return dict(
        ok=True,
        concurrency=n,
        decode_tok_s=round(pure_tokens / pure_s, 2) if pure_s else None,
        pure_decode_steps=pure_tokens // n,
        output_tokens=total,
        wall_s=round(wall, 3),
        output_tok_s=round(total / wall, 2),
        ttft_ms=latency_stats(ttft),
        itl_ms=latency_stats(itl),
        e2e_ms=latency_stats(e2e),
        slowest_steps=_slowest(steps),
        steps=len(steps),
        peak_gpu_gib=round(torch.cuda.max_memory_allocated() / GIB, 3) if cuda else None,
        peak_gpu_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3) if cuda else None,
    )


def decode_steps_during_prefill(n: int, ctx: int, per_step: int) -> int:
    """Steps the first of `n` requests of `ctx` prompt tokens may decode in while the other n - 1
    prefill, `per_step` prompt tokens a step (and one step each to start decoding)."""
    return (n - 1) * (-(-ctx // per_step) + 1)


def _prefill_per_step(engine: LLMEngine) -> int:
    """The fewest prompt tokens a step carries while requests decode: the chunk, or the ITL
    budget's cap (it starts at its floor and only learns upward)."""
    cap = engine.scheduler.prefill_token_cap
    return min(engine.config.max_num_batched_tokens, cap or engine.config.max_num_batched_tokens)


def _slowest(steps: list[tuple[float, int, int, int | None]], n: int = 8) -> list[dict]:
    """Where ITL p99 comes from: the `n` slowest steps' milliseconds, tokens out, requests still
    waiting for their first token, and the prefill cap the ITL budget set after them."""
    ranked = sorted(steps, key=lambda step: step[0], reverse=True)[:n]
    return [dict(ms=round(s * 1e3, 2), tokens=k, prefilling=w, cap=c) for s, k, w, c in ranked]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama-3b")
    ap.add_argument("--model", default=None, help="a model (GGUF file, dir) instead of random:SHAPE")
    ap.add_argument("--ctx", type=token_count, nargs="+", required=True, help="prompt tokens per request")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--warmup-tokens", type=int, default=4)
    add_engine_flags(
        ap,
        vram_budget=REQUIRED,
        max_num_batched_tokens="4096",
        cpu_kv_budget="0GiB",
        cold_attention="auto",
        sparse_budget_tokens="4096",
        hot_window_tokens="1024",
        target_itl_ms=None,
    )
    ap.add_argument("--mode", default=None, help="label for the JSON lines (default from the options)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "kvspill_concurrent.jsonl"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    n_max = max(args.concurrency)
    # Each request's budget grows by the mixed steps it may decode in while the others prefill,
    # at most one a prefill_floor_tokens chunk (the ITL budget's cap is never below it).
    per_step = min(args.max_num_batched_tokens, prefill_floor_tokens(bench_flags(args)["block_size"]))
    extra = decode_steps_during_prefill(n_max, max(args.ctx), per_step)
    max_len = max(args.ctx) + 1 + args.warmup_tokens + args.new_tokens + extra
    bench = setup_engine(args, max_len, max_num_seqs=max(8, n_max))
    engine, base = bench.engine, dict(bench.base, new_tokens=args.new_tokens)
    weight_bytes, kv_per_token, gpu_kv_tokens = bench.weight_bytes, bench.kv_per_token, bench.gpu_kv_tokens
    hbm_gbs, h2d_gbs = bench.hbm_gbs, bench.h2d_gbs
    run_concurrent(engine, 512, 2, 4, 1, seed=0)  # warm-up: prefill shapes and batch-2 graphs
    with open(args.out, "a") as f:
        for ctx in args.ctx:
            for n in args.concurrency:
                rec = dict(base, ctx=ctx)
                before = engine.kv_stats().total_bytes_moved
                try:
                    rec.update(
                        run_concurrent(engine, ctx, n, args.new_tokens, args.warmup_tokens, seed=ctx + n)
                    )
                    hot = min(n * ctx, gpu_kv_tokens)
                    cold = n * ctx - hot
                    floor_s = (weight_bytes + kv_per_token * hot) / (hbm_gbs * 1e9) + kv_per_token * cold / (
                        h2d_gbs * 1e9
                    )
                    rec.update(
                        floor_tok_s=round(n / floor_s, 2),
                        hot_tokens=hot,
                        cold_tokens=cold,
                        floor_ratio=round((rec["decode_tok_s"] or 0) * floor_s / n, 3),
                    )
                    rec["bytes_moved"] = engine.kv_stats().total_bytes_moved - before
                    rec["host_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
                except torch.OutOfMemoryError as e:
                    rec.update(ok=False, concurrency=n, err=f"OOM: {str(e)[:200]}")
                print(json.dumps(rec), flush=True)
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
