"""Engine benchmark on a GPU: TTFT and decode tok/s per context, beside their HBM floor.

    python -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 32768 128K --out $OUT/kvspill.jsonl
    python -m kvspill.bench --shape llama-8b --vram-budget 70GiB --ctx 32K 128K --tensor-parallel-size 2

The engine flags are the product's (`kvspill serve --help`, docs/flags.md; `engine_flags.py`), with
the benchmark's defaults: 4096-token chunks, 16-token blocks, no prefix caching, token ids only.
The JSON fields keep their names (`cap_gib`, `chunk`, `cpu_kv_gib`: those of the peer's lines).

With `--tensor-parallel-size N` (N GPUs, one process each, `--vram-budget` per GPU) each line also
has the time rank 0 spent in collectives per decode step (CUDA events around each all-reduce and
the logits all-gather: 2 all-reduces per layer, one for the embedding, one all-gather) and
`max_gpu_only_context`, the longest sequence the GPU tiers hold with no KV spilled.

Sparse cold attention (W5): `--cpu-kv-budget 40GiB --cold-attention sparse --sparse-budget-tokens 4096`;
its lines add the blocks the decode rows selected out of those they had (`sparse_selected_blocks`,
`sparse_cold_blocks`) and a floor that moves only the budget's bytes plus the summaries' scan.

Exact cold paths (`--cold-attention cpu|stream|split`): each line adds, over the timed tokens,
each path's share of the cold bytes, its ms per token and the rate it reached (`cold_cpu_*`,
`cold_stream_*`); with split, a token near max(cpu ms, stream ms) means the two paths overlap.

`--fill-only-prefill` (`fill_only.py`): decode and memory at a context, its prefill's attention skipped.

Random weights with the real shapes (speed does not depend on values), the same workloads and
JSON fields as `shared/bench/hf_peer.py` plus kvspill's own: the floor (weights + KV bytes
over the HBM copy bandwidth measured in this run) and measured/floor. One line per context.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from kvspill.bench import fill_only
from kvspill.bench.engine_flags import REQUIRED, add_engine_flags, engine_kwargs, token_count
from kvspill.bench.plan_figures import floor_and_plan
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.hardware.calibrate import measure_copy_gbs
from kvspill.model.parallel import CollectiveTimer
from kvspill.model.quant import held_scale_pair_bytes, model_weight_bytes
from kvspill.sampling_params import SamplingParams
from kvspill.stats import ColdAttentionCounters

GIB = 2**30


PROFILED_TOKENS = 16  # with tensor parallelism: decode steps after the timed span, under the profiler


def run_context(engine: LLMEngine, ctx: int, new_tokens: int, warmup_tokens: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
    timer = engine.parallel.tp.timer if engine.parallel is not None else None
    profiled = PROFILED_TOKENS if timer is not None else 0
    params = SamplingParams(
        temperature=0.0,
        max_tokens=1 + warmup_tokens + new_tokens + profiled,
        ignore_eos=True,
        detokenize=False,
    )
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    engine.add_request(prompt, params)
    token_times: list[float] = []
    timed_end = 1 + warmup_tokens + new_tokens
    profiler = None
    cold_span: list[ColdAttentionCounters | None] = []  # at the timed span's first and last token
    progress = PrefillProgress(t0, ctx, engine.config.max_num_batched_tokens)
    progress.step()  # before each step while no token came
    for step in engine.run():
        for out in step.outputs:
            for _ in out.delta_token_ids:
                token_times.append(time.perf_counter())
                if len(token_times) in (warmup_tokens + 1, timed_end):
                    cold_span.append(engine.kv_stats().runner.cold)
                if timer is not None and len(token_times) == max(1, warmup_tokens):
                    timer.take()  # drop prefill's and warm-up's collectives (one sync, before the span)
                if profiled and len(token_times) == timed_end:
                    profiler = _start_kernel_profiler()
        if not token_times:
            progress.step()
    ttft = token_times[0] - t0
    decode_span = token_times[timed_end - 1] - token_times[warmup_tokens]
    n = timed_end - 1 - warmup_tokens
    return dict(
        ok=True,
        ttft_s=round(ttft, 4),
        decode_tok_s=round(n / decode_span, 2),
        new_tokens=n,
        peak_gpu_gib=round(torch.cuda.max_memory_allocated() / GIB, 3),
        peak_gpu_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3),
        card_used_gib=_card_used_gib(),
        **(_cold_paths(cold_span[0], cold_span[1], n) if len(cold_span) == 2 else {}),
        **(_collectives(engine, timer) if timer is not None else {}),
        **(_graph_collectives(profiler, len(token_times) - timed_end) if profiler is not None else {}),
    )


def _card_used_gib() -> float:
    """What the whole card holds at the row's end, as nvidia-smi counts it (every process, the CUDA
    context, kernel images): the allocator keeps its cached blocks, so near the reserved peak plus
    what is outside it. `--vram-budget` is a budget for this figure."""
    free, total = torch.cuda.mem_get_info()
    return round((total - free) / GIB, 3)


class PrefillProgress:
    """A line on stderr every PREFILL_PROGRESS_S of a prefill: how far it got if the run is cut
    off (a 1M-token prefill of an 8B model takes ~20 minutes on an H200) and the allocator's peak."""

    PREFILL_PROGRESS_S = 60.0

    def __init__(self, t0: float, ctx: int, chunk: int) -> None:
        self.t0, self.ctx, self.chunk = t0, ctx, chunk
        self.steps = 0
        self.last = t0

    def step(self) -> None:
        now = time.perf_counter()
        if now - self.last >= self.PREFILL_PROGRESS_S:
            self.last = now
            done = min(self.ctx, self.steps * self.chunk)
            print(
                f"[bench] prefill {now - self.t0:.0f} s: {self.steps} chunks, ~{done:,} of {self.ctx:,} tokens; "
                f"peak gpu reserved {torch.cuda.max_memory_reserved() / GIB:.2f} GiB",
                file=sys.stderr,
                flush=True,
            )
        self.steps += 1


def _cold_paths(start: ColdAttentionCounters | None, end: ColdAttentionCounters | None, tokens: int) -> dict:
    """What each exact cold path did over the timed decode span: its share of the cold bytes,
    its time per token and the rate it reached (the CPU kernel's wall time once q is on the
    host; the stream's measured copy time). Beside decode_tok_s it shows whether "split" overlaps
    its two paths: a token then takes about max(cpu ms, stream ms), not their sum. Steps that
    replay a stream CUDA graph have no copy timing: their bytes count in the shares only."""
    if start is None or end is None or not tokens:
        return {}
    cpu_b, stream_b = end.cpu_bytes - start.cpu_bytes, end.stream_bytes - start.stream_bytes
    cpu_s, copy_s = end.cpu_seconds - start.cpu_seconds, end.stream_copy_seconds - start.stream_copy_seconds
    graph_b = end.stream_graph_bytes - start.stream_graph_bytes
    if not cpu_b + stream_b:
        return {}
    return dict(
        cold_cpu_share=round(cpu_b / (cpu_b + stream_b), 3),
        cold_cpu_ms_per_token=round(cpu_s / tokens * 1e3, 2),
        cold_cpu_gbs=round(cpu_b / cpu_s / 1e9, 1) if cpu_s else None,
        cold_stream_ms_per_token=round(copy_s / tokens * 1e3, 2),
        cold_stream_gbs=round((stream_b - graph_b) / copy_s / 1e9, 1) if copy_s else None,
        cold_stream_graph_share=round(graph_b / stream_b, 3) if stream_b else 0.0,
    )


def _start_kernel_profiler() -> torch.profiler.profile:
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    profiler.start()
    return profiler


def _graph_collectives(profiler: torch.profiler.profile, steps: int) -> dict:
    """Rank 0's device time in NCCL kernels per decode step, from the kernel trace of `steps`
    steps: unlike the CUDA events of `_collectives`, this sees the all-reduces inside replayed
    CUDA graphs. A kernel's time includes its wait for the other ranks to arrive."""
    torch.cuda.synchronize()
    profiler.stop()
    nccl_us = all_us = 0.0
    for event in profiler.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        all_us += event.time_range.elapsed_us()
        if "nccl" in event.name.lower():
            nccl_us += event.time_range.elapsed_us()
    if not steps or not all_us:
        return dict(graph_nccl_ms_per_step=None, graph_steps_profiled=steps)
    return dict(
        graph_nccl_ms_per_step=round(nccl_us / steps / 1e3, 3),
        graph_kernel_ms_per_step=round(all_us / steps / 1e3, 3),
        graph_steps_profiled=steps,
    )


def _collectives(engine: LLMEngine, timer: CollectiveTimer) -> dict:
    """Rank 0's time in collectives per one-token decode step (model/parallel.py): each such step
    runs 2 all-reduces per layer, one for the embedding and one all-gather of the logits."""
    seconds, calls = timer.take()
    per_step = 2 * engine.bundle.loaded.num_layers + 2
    steps = calls / per_step
    return dict(
        collective_ms_per_step=round(seconds / steps * 1e3, 3) if steps else None,
        collective_calls_per_step=per_step,
        collective_steps_timed=round(steps, 1),
    )


# The engine settings of a bench engine whose script does not take the flag (concurrent_bench
# takes fewer than this one): fixed, so a row does not move with EngineConfig's defaults.
FIXED_DEFAULTS: dict[str, object] = dict(
    cpu_kv_budget_bytes=0,
    hot_window_tokens=1024,
    block_size=16,
    cold_attention="auto",
    sparse_budget_tokens=4096,
    sparse_cache_seqs=1,
    sparse_prompt_window=0,
    sparse_prompt_share=0.5,
    kv_cache_dtype="auto",
    kv_cache_dtype_skip_layers=(),
    attention="auto",
    cpu_attention_threads=None,
    async_scheduling=True,
    cpu_offload_gb=0.0,
    tensor_parallel_size=1,
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama-1b")
    ap.add_argument("--model", default=None, help="a model (GGUF file, dir) instead of random:SHAPE")
    ap.add_argument("--ctx", type=token_count, nargs="+", required=True, help="contexts, e.g. 8192 32K 128K")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--warmup-tokens", type=int, default=8)
    add_engine_flags(
        ap,
        vram_budget=REQUIRED,
        max_num_batched_tokens="4096",
        cpu_kv_budget="0GiB",
        hot_window_tokens="1024",
        block_size=16,
        cold_attention="auto",
        sparse_budget_tokens="4096",
        sparse_cache_seqs=1,
        sparse_prompt_window="0",
        sparse_prompt_share=0.5,
        kv_cache_dtype="auto",
        kv_cache_dtype_skip_layers="",
        attention="auto",
        cpu_attention_threads=None,
        cpu_offload_gb=0.0,
        async_scheduling=True,
        tensor_parallel_size=1,
    )
    fill_only.add_flag(ap)
    ap.add_argument("--mode", default=None, help="label for the JSON lines (default from the options)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "kvspill.jsonl"))
    return ap.parse_args(argv)


@dataclass
class BenchSetup:
    """An engine on the GPU for a benchmark and what every JSON line of it shares."""

    engine: LLMEngine
    base: dict
    hbm_gbs: float
    h2d_gbs: float
    weight_bytes: int
    kv_per_token: int
    gpu_kv_tokens: int  # what the gpu tier holds: the rest of a sequence is cold


def bench_flags(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig keyword arguments of the engine flags, as given (a flag the script does not
    take: FIXED_DEFAULTS)."""
    return {**FIXED_DEFAULTS, **engine_kwargs(args)}


def bench_config(args: argparse.Namespace, max_len: int, max_num_seqs: int) -> EngineConfig:
    """The engine of `args` for sequences of `max_len` tokens: random weights of `--shape` (or
    `--model`), token ids in and out, no prefix caching (each row prefills its whole context)."""
    return EngineConfig(
        model=getattr(args, "model", None) or f"random:{args.shape}",
        max_model_len=-(-max_len // 1024) * 1024,
        max_num_seqs=max_num_seqs,
        enable_prefix_caching=False,
        skip_tokenizer_init=True,  # token ids in, token ids out
        **bench_flags(args),
    )


def mode_label(args: argparse.Namespace) -> str:
    """The row's `mode`: `--mode`, else what sets this run apart (tiers and cold path, sparse
    budget, block size, KV format, CPU attention, fill-only, tensor parallelism)."""
    flags = bench_flags(args)
    cold = flags["cold_attention"]
    mode = args.mode or ("gpu-kv" if not flags["cpu_kv_budget_bytes"] else f"tiers-{cold}")
    if cold == "sparse" and not args.mode:
        mode += f"-{flags['sparse_budget_tokens']}" + ("" if flags["sparse_cache_seqs"] else "-nocache")
    if cold == "sparse" and flags["sparse_prompt_window"]:
        mode += f"-prompt{flags['sparse_prompt_window']}x{flags['sparse_prompt_share']:g}"
    if flags["block_size"] != 16:
        mode += f"-bs{flags['block_size']}"
    if flags["kv_cache_dtype"] != "auto":
        mode += f"-kv-{flags['kv_cache_dtype']}"
    if flags["kv_cache_dtype_skip_layers"]:
        mode += f"-skip{len(flags['kv_cache_dtype_skip_layers'])}"
    if flags["attention"] == "cpu":
        mode += "-attention-cpu"
    if flags["cpu_attention_threads"]:
        mode += f"-t{flags['cpu_attention_threads']}"
    if getattr(args, "fill_only_prefill", False):
        mode += "-fillonly"
    if flags["tensor_parallel_size"] > 1:
        mode += f"-tp{flags['tensor_parallel_size']}"
    return mode


def setup_engine(args: argparse.Namespace, max_len: int, max_num_seqs: int = 8) -> BenchSetup:
    """Measure HBM and H2D (as `doctor --calibrate` does), then build the engine of `args`
    (shape, engine flags, mode) for `max_len` tokens."""
    device = torch.device("cuda")
    h2d_gbs, _, hbm_gbs = measure_copy_gbs(device, 2 * GIB)
    config = bench_config(args, max_len, max_num_seqs)
    engine = LLMEngine(config)
    if engine.parallel is not None:
        engine.parallel.tp.timer.enabled = True
    if getattr(args, "fill_only_prefill", False):
        fill_only.apply(engine)
    offloader = engine.bundle.loaded.offloader
    offloaded_bytes = offloader.host_bytes if offloader is not None else 0
    # What HBM reads each step: the resident weights (offloaded ones cross PCIe: see the floor),
    # not the Q4_K scale pairs (held for batched steps; one sequence's GEMV reads the blocks alone).
    scale_pair_bytes = held_scale_pair_bytes(engine.bundle.loaded.model)
    weight_bytes = model_weight_bytes(engine.bundle.loaded.model) - offloaded_bytes - scale_pair_bytes
    gpu_kv_tokens = engine.bundle.num_blocks * config.block_size
    flags = bench_flags(args)
    base = dict(
        system="kvspill-0.1.0",
        shape=os.path.basename(args.model) if getattr(args, "model", None) else args.shape,
        cap_gib=flags["vram_budget_bytes"] / GIB,  # the JSON fields keep the peer's names
        card=torch.cuda.get_device_name(device),
        date=datetime.date.today().isoformat(),
        mode=mode_label(args),
        hbm_copy_gbs=round(hbm_gbs, 1),
        h2d_gbs=round(h2d_gbs, 1),
        weight_gib=round(weight_bytes / GIB, 3),
        offloaded_weight_gib=round(offloaded_bytes / GIB, 3),
        scale_pair_gib=round(scale_pair_bytes / GIB, 3),  # held beside weight_gib (model/quant.py)
        gpu_kv_gib=round(engine.bundle.storage.nbytes / GIB, 3),
        cpu_kv_gib=flags["cpu_kv_budget_bytes"] / GIB,
        chunk=flags["max_num_batched_tokens"],
        async_scheduling=engine.async_scheduling,
        # per rank with tensor parallelism: weight_gib, gpu_kv_gib and cap_gib are one GPU's
        tensor_parallel_size=config.tensor_parallel_size,
        max_gpu_only_context=gpu_kv_tokens,
    )
    kv_per_token = engine.bundle.storage.layout.bytes_per_token
    return BenchSetup(engine, base, hbm_gbs, h2d_gbs, weight_bytes, kv_per_token, gpu_kv_tokens)


def measure_context(bench: BenchSetup, args: argparse.Namespace, ctx: int, rec: dict) -> None:
    """One row: time a request of `ctx` tokens and add the floor, the plans, the sparse and cold
    figures and the bytes moved to `rec` (in place: a row cut off by an OOM keeps what it had)."""
    engine, config = bench.engine, bench.engine.config
    before = engine.kv_stats().total_bytes_moved
    cold_before = engine.kv_stats().runner.cold
    rec.update(run_context(engine, ctx, args.new_tokens, args.warmup_tokens, seed=ctx))
    rec.update(
        floor_and_plan(
            engine,
            config,
            ctx,
            bench.weight_bytes,
            bench.kv_per_token,
            bench.gpu_kv_tokens,
            bench.hbm_gbs,
            bench.h2d_gbs,
            rec["decode_tok_s"],
        )
    )
    cold = engine.kv_stats().runner.cold
    if config.cold_attention == "sparse" and cold is not None and cold_before is not None:
        rec.update(
            sparse_selected_blocks=cold.sparse_selected_blocks - cold_before.sparse_selected_blocks,
            sparse_cold_blocks=cold.sparse_cold_blocks - cold_before.sparse_cold_blocks,
            # copied to the GPU: all selected blocks uncached, the misses with the cache
            sparse_copied_gib=round((cold.sparse_bytes - cold_before.sparse_bytes) / GIB, 3),
            summary_gib=round(cold.summary_bytes / GIB, 3),
        )
    if args.fill_only_prefill:
        fill_only.mark(rec)
    rec.update(
        bytes_moved=engine.kv_stats().total_bytes_moved - before,
        host_rss_gib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    bench = setup_engine(args, max(args.ctx) + 1 + args.warmup_tokens + args.new_tokens)
    run_context(bench.engine, 512, 8, 2, seed=0)  # warm-up: kernels for prefill shapes
    with open(args.out, "a") as f:
        for ctx in args.ctx:
            rec = dict(bench.base, ctx=ctx)
            try:
                measure_context(bench, args, ctx, rec)
            except torch.OutOfMemoryError as e:
                rec.update(ok=False, err=f"OOM: {str(e)[:200]}")
            print(json.dumps(rec), flush=True)
            f.write(json.dumps(rec) + "\n")
    bench.engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
