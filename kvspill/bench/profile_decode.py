"""Where a decode step's time goes on a GPU: host phases vs the replayed graph.

    python -m kvspill.bench.profile_decode --shape llama-1b --ctx 8192

Prints, per step (median over the run): the whole `engine.step()`, the scheduler's schedule and
update, the runner's launch of a step (input building, copies, graph replay, sampling: host time),
the completion of a step (waiting for its tokens, then the scheduler update and the outputs), and
the graph replay as the GPU saw it (CUDA events, read after the run: no extra sync), so the gap
between measured decode speed and the HBM floor can be split into host overhead and GPU time.
With async scheduling (the CUDA default) the launch of step N+1 overlaps the GPU work of step N;
`--no-async-scheduling` shows the serial engine. `--concurrency N` runs N sequences of `ctx`
tokens and counts only the steps in which all N decode (pure decode steps, as
llama-batched-bench's decode phase); `--kernels K` then profiles K such steps:

    python -m kvspill.bench.profile_decode --model l8b-Q4_K_M.gguf --ctx 2048 --concurrency 8 --kv-cache-memory 8GiB --kernels 10

`--profiler-window K` opens the CUDA profiler API's range (cudaProfilerStart / Stop) around K
decode steps at the same point, so Nsight Compute measures only those kernels (each graph node
apart) and not the model's set-up or prefill, which under ncu take minutes:

    ncu --profile-from-start off --graph-profiling node --section SpeedOfLight --csv \
        python -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 20 --profiler-window 1
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from kvspill.bench.concurrent_bench import decode_steps_during_prefill
from kvspill.bench.engine_flags import add_engine_flags, engine_kwargs, token_count
from kvspill.bench.plan_figures import batched_plan_tok_s
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.plan.choices import PREFILL_FLOOR_TOKENS
from kvspill.sampling_params import SamplingParams


def _timed(bucket: list[float], fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        bucket.append(time.perf_counter() - t)
        return out

    return wrapper


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-1b")
    ap.add_argument("--model", default=None, help="a model (GGUF file, dir) instead of random:SHAPE")
    ap.add_argument("--ctx", type=token_count, default=8192)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--kernels", type=int, default=0, help="also profile this many decode steps per kernel")
    ap.add_argument("--concurrency", type=int, default=1, help="sequences decoding together")
    ap.add_argument(
        "--profiler-window",
        type=int,
        default=0,
        help="open the CUDA profiler range (ncu --profile-from-start off, nsys --capture-range=cudaProfilerApi) "
        "around this many decode steps",
    )
    add_engine_flags(ap, async_scheduling=True, kv_cache_memory="4GiB")
    return ap.parse_args(argv)


def _engine(args: argparse.Namespace) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=args.model or f"random:{args.shape}",
            max_model_len=args.ctx + _max_tokens(args) + 64,
            max_num_batched_tokens=4096,
            max_num_seqs=max(8, args.concurrency),
            enable_prefix_caching=False,
            skip_tokenizer_init=True,  # token ids in, token ids out
            **engine_kwargs(args),
        )
    )


def _instrument(
    engine: LLMEngine, times: dict[str, list[float]]
) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    """Time the scheduler's, the runner's and the engine's parts into `times`; returns the CUDA
    events around each graph replay (read after the run: recording them adds no sync)."""
    sched, runner = engine.scheduler, engine.runner
    sched.schedule = _timed(times["schedule"], sched.schedule)  # type: ignore[method-assign]
    sched.update_from_output = _timed(times["update"], sched.update_from_output)  # type: ignore[method-assign]
    runner.execute_async = _timed(times["launch (host)"], runner.execute_async)  # type: ignore[method-assign]
    engine._complete = _timed(times["complete (wait+update)"], engine._complete)  # type: ignore[method-assign]
    runner.sampler.sample_tensor = _timed(times["sample (host)"], runner.sampler.sample_tensor)  # type: ignore[method-assign]
    graphs = runner.graphs
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    if graphs is not None:
        original_run = graphs.run

        def run_with_events(*args: Any) -> Any:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = original_run(*args)
            end.record()
            events.append((start, end))
            return out

        graphs.run = _timed(times["graph copy+replay"], run_with_events)  # type: ignore[method-assign]
    return events


def _max_tokens(args: argparse.Namespace) -> int:
    """Each request's budget: the profiled steps, plus the steps it may decode while the others
    prefill (at least PREFILL_FLOOR_TOKENS of prompt a step, the ITL budget's floor)."""
    return 2 * args.steps + decode_steps_during_prefill(args.concurrency, args.ctx, PREFILL_FLOOR_TOKENS)


def _pure_decode(step: Any, n: int, tokens: dict[str, int]) -> bool:
    """Whether all `n` requests decoded exactly one token in `step`, each past its first (the
    step that prefills a prompt samples a token too); `tokens` counts each request's tokens."""
    pure = len(step.outputs) == n and all(
        tokens.get(out.req_id, 0) >= 1 and len(out.delta_token_ids) == 1 for out in step.outputs
    )
    for out in step.outputs:
        tokens[out.req_id] = tokens.get(out.req_id, 0) + len(out.delta_token_ids)
    return pure


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.profiler_window and not torch.cuda.is_available():
        raise SystemExit(
            "--profiler-window needs a CUDA GPU (it brackets kernels for ncu / nsys); drop it on the CPU"
        )
    engine = _engine(args)
    times: dict[str, list[float]] = defaultdict(list)
    events = _instrument(engine, times)
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=0, max_tokens=_max_tokens(args), ignore_eos=True, detokenize=False)
    for _ in range(args.concurrency):
        engine.add_request(torch.randint(0, engine.vocab_size, (args.ctx,), generator=gen).tolist(), params)
    step_times: list[float] = []
    first: dict[str, int] = {}  # where each phase's list stood at the first pure decode step
    tokens: dict[str, int] = {}
    for step in engine.run():
        if not _pure_decode(step, args.concurrency, tokens):
            continue
        first = first or {"events": len(events), **{name: len(v) for name, v in times.items()}}
        step_times.append(step.seconds)
        if len(step_times) == args.steps // 2:  # the profilers look at the run's middle steps
            if args.kernels:
                _kernel_table(engine, args.kernels)
            if args.profiler_window:
                _profiler_window(engine, args.profiler_window)
        if len(step_times) >= args.steps:
            break
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    _report(
        args,
        engine,
        step_times,
        {name: v[first.get(name, 0) :] for name, v in times.items()},
        [start.elapsed_time(end) for start, end in events[first.get("events", 0) :]],
    )
    return 0


def _report(
    args: argparse.Namespace, engine: LLMEngine, step_times: list[float], times: dict, gpu_ms: list[float]
) -> None:
    skip = 10
    mode = "async" if engine.async_scheduling else "sync"
    n = args.concurrency
    print(
        f"{args.model or args.shape} ctx {args.ctx} x {n}: {len(step_times)} pure decode steps on "
        f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'the CPU'} ({mode} scheduling)"
    )
    step_ms = statistics.median(step_times[skip:]) * 1e3
    print(f"  engine.step        {step_ms:8.3f} ms ({n / step_ms * 1e3:.1f} tok/s in all)")
    planned = batched_plan_tok_s(engine.memory_plan, args.ctx, n)  # the sized plan at this batch
    if planned is not None:
        print(
            f"  plan               {planned:8.1f} tok/s in all (plan / measured {planned * step_ms / n / 1e3:.3f})"
        )
    for name, values in times.items():
        # a phase some steps skip (no graph replay when the KV is partly off the GPU) may have none
        shown = f"{statistics.median(values[skip:]) * 1e3:8.3f} ms" if values[skip:] else "     (not run)"
        print(f"  {name:<20} {shown}")
    if gpu_ms[skip:]:
        print(f"  graph GPU time     {statistics.median(gpu_ms[skip:]):8.3f} ms (events around copy+replay)")


def _run_steps(engine: LLMEngine, steps: int) -> None:
    """`steps` engine steps, then wait for the GPU work they queued."""
    for _ in itertools.islice(engine.run(), steps):
        pass
    torch.cuda.synchronize()


def _kernel_table(engine: LLMEngine, steps: int) -> None:
    """CUDA time per kernel over `steps` decode steps (kernels inside graph replays included)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _run_steps(engine, steps)
    print(f"kernels over {steps} decode steps (CUDA time):")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


def _profiler_window(engine: LLMEngine, steps: int) -> None:
    """Run `steps` engine steps inside the CUDA profiler API's range: an external profiler started
    with capture off (ncu --profile-from-start off) sees only these kernels."""
    torch.cuda.synchronize()  # the window holds no kernel of an earlier step
    torch.cuda.profiler.start()
    try:
        _run_steps(engine, steps)
    finally:
        torch.cuda.profiler.stop()
    print(f"profiler window: {steps} engine steps between cudaProfilerStart and cudaProfilerStop")


if __name__ == "__main__":
    sys.exit(main())
