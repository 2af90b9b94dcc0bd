"""Where a decode step's time goes on a GPU: host phases vs the replayed graph.

    python -m kvspill.bench.profile_decode --shape llama-1b --ctx 8192

Prints, per step (median over the run): the whole `engine.step()`, the scheduler's schedule and
update, the runner's launch of a step (input building, copies, graph replay, sampling: host time),
the completion of a step (waiting for its tokens, then the scheduler update and the outputs), and
the graph replay as the GPU saw it (CUDA events, read after the run: no extra sync), so the gap
between measured decode speed and the HBM floor can be split into host overhead and GPU time.
With async scheduling (the CUDA default) the launch of step N+1 overlaps the GPU work of step N;
`--no-async-scheduling` shows the serial engine.
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

from kvspill.bench.engine_flags import add_engine_flags, engine_kwargs, token_count
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
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
    add_engine_flags(ap, async_scheduling=True)
    return ap.parse_args(argv)


def _engine(args: argparse.Namespace) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=args.model or f"random:{args.shape}",
            max_model_len=args.ctx + args.steps + 64,
            max_num_batched_tokens=4096,
            max_num_seqs=8,
            enable_prefix_caching=False,
            kv_cache_memory_bytes=4 * 2**30,
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


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    engine = _engine(args)
    times: dict[str, list[float]] = defaultdict(list)
    events = _instrument(engine, times)
    prompt = torch.randint(0, engine.vocab_size, (args.ctx,)).tolist()
    engine.add_request(
        prompt, SamplingParams(temperature=0, max_tokens=args.steps, ignore_eos=True, detokenize=False)
    )
    step_times = []
    for step in engine.run():
        step_times.append(step.seconds)
        if args.kernels and len(step_times) == args.steps // 2:
            _kernel_table(engine, args.kernels)
    torch.cuda.synchronize()
    gpu_ms = [start.elapsed_time(end) for start, end in events]
    skip = 10
    mode = "async" if engine.async_scheduling else "sync"
    print(
        f"{args.model or args.shape} ctx {args.ctx}: {len(step_times)} steps on {torch.cuda.get_device_name()} ({mode} scheduling)"
    )
    print(f"  engine.step        {statistics.median(step_times[skip:]) * 1e3:8.3f} ms")
    for name, values in times.items():
        print(f"  {name:<20} {statistics.median(values[skip:]) * 1e3:8.3f} ms")
    if gpu_ms:
        print(f"  graph GPU time     {statistics.median(gpu_ms[skip:]):8.3f} ms (events around copy+replay)")
    return 0


def _kernel_table(engine: LLMEngine, steps: int) -> None:
    """CUDA time per kernel over `steps` decode steps (kernels inside graph replays included)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in itertools.islice(engine.run(), steps):
            pass
        torch.cuda.synchronize()
    print(f"kernels over {steps} decode steps (CUDA time):")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


if __name__ == "__main__":
    sys.exit(main())
