"""Prefix-cache benchmark (issue 14): one long shared prefix + N different questions, C at a time.

    python -m kvspill.bench.prefix_bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB \
        --disk-kv-budget 40GiB --kv-disk-dir /tmp/kvdisk --kv-persist-dir /tmp/kvpersist \
        --ctx 128K --questions 16 --concurrency 4 --out $OUT/prefix.jsonl

Phases, each on a fresh engine (random weights of the shape; the engine directly, no server):
- `cpu`: the prefix is prefilled once (the cold TTFT), then the questions run: their prefix is found
  in the gpu tier (sinks, hot window) and the cpu tier (the rest), attended in place.
- `disk`: the same with a cpu tier of `--disk-phase-cpu-blocks` blocks: the cold part of the prefix is
  on the disk tier.
- `persist`: an engine with `--kv-persist-dir` prefills the prefix and writes its blocks (the time
  to write them all is reported), then is dropped; a second engine on the same directory (a restart)
  runs the questions: the first one reads the blocks from the files into the cpu tier.
One JSON line per phase: cold TTFT, the questions' TTFT (p50, max, each), cached tokens, tokens per
tier found, and the bytes read per hit (cold attention and tier copies during the questions, and
the persist files read), divided by the number of questions.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import time
from typing import Any

import torch

from kvspill.bench.engine_flags import add_engine_flags, engine_kwargs, token_count
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.sampling_params import SamplingParams
from kvspill.storage.persist import clear_dir

GIB = 2**30


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama-8b")
    ap.add_argument("--model", default=None, help="a model (dir, GGUF) instead of random:SHAPE")
    add_engine_flags(
        ap,
        device="auto",
        dtype="auto",
        vram_budget=None,
        cpu_kv_budget="0GiB",
        disk_kv_budget="0GiB",  # the disk phase needs it
        kv_disk_dir=None,
        kv_persist_dir=None,  # the persist phase needs it
        kv_persist_budget="64GiB",
        max_num_batched_tokens="4096",
        hot_window_tokens="1024",
        block_size=16,
        num_kv_blocks=None,
        num_cpu_kv_blocks=None,
        num_disk_kv_blocks=None,
    )
    ap.add_argument("--ctx", type=token_count, default=131072, help="prefix + question tokens")
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument(
        "--new-tokens", type=int, default=1, help="per question (1: the bytes read are the prefill's alone)"
    )
    ap.add_argument(
        "--phases", nargs="+", default=["cpu", "disk", "persist"], choices=["cpu", "disk", "persist"]
    )
    ap.add_argument("--disk-phase-cpu-blocks", type=int, default=64, help="cpu tier of the disk phase")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "prefix.jsonl"))
    return ap.parse_args(argv)


def _engine(args: argparse.Namespace, phase: str, persist: bool) -> LLMEngine:
    """A fresh engine for `phase`: the disk phase's cpu tier is small (its prefix lands on disk);
    only the disk phase has a disk tier, only the persist phase a persist directory."""
    disk_phase = phase == "disk"
    flags = engine_kwargs(args)
    flags.update(
        disk_kv_budget_bytes=args.disk_kv_budget if disk_phase else 0,
        num_cpu_kv_blocks=args.disk_phase_cpu_blocks if disk_phase else args.num_cpu_kv_blocks,
        num_disk_kv_blocks=args.num_disk_kv_blocks if disk_phase else None,
        kv_persist_dir=args.kv_persist_dir if persist else None,
    )
    config = EngineConfig(
        model=args.model or f"random:{args.shape}",
        max_model_len=-(-(args.ctx + args.new_tokens + 1) // 1024) * 1024,
        max_num_seqs=args.concurrency,
        skip_tokenizer_init=True,
        **flags,
    )
    return LLMEngine(config)


def _prompts(args: argparse.Namespace, vocab_size: int) -> tuple[list[int], list[list[int]]]:
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab_size, (args.ctx - args.question_tokens,), generator=gen).tolist()
    questions = [
        torch.randint(0, vocab_size, (args.question_tokens,), generator=gen).tolist()
        for _ in range(args.questions)
    ]
    return prefix, questions


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_requests(
    engine: LLMEngine, prompts: list[list[int]], concurrency: int, new_tokens: int
) -> list[dict]:
    """Closed loop: `concurrency` requests in flight, the next one added when one finishes.
    Returns per request (in prompt order): TTFT, cached tokens, output tokens."""
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, detokenize=False)
    results: list[dict[str, Any]] = [{} for _ in prompts]
    started: dict[str, tuple[int, float]] = {}
    pending = list(enumerate(prompts))

    def admit() -> None:  # before each step, as many as the concurrency allows
        while pending and len(started) < concurrency:
            i, prompt = pending.pop(0)
            started[engine.add_request(prompt, params)] = (i, time.perf_counter())

    admit()
    for step in engine.run():
        for out in step.outputs:
            i, t0 = started[out.req_id]
            if "ttft_s" not in results[i] and out.token_ids:
                results[i]["ttft_s"] = round(time.perf_counter() - t0, 4)
            if out.finished:
                results[i].update(cached_tokens=out.num_cached_tokens, token_ids=list(out.token_ids))
                del started[out.req_id]
        admit()
    return results


def _read_bytes(engine: LLMEngine) -> int:
    """Bytes the cold paths read plus bytes copied between tiers, since start."""
    runner = engine.kv_stats().runner
    cold = runner.cold.cpu_bytes + runner.cold.stream_bytes if runner.cold is not None else 0
    return cold + engine.kv_stats().total_bytes_moved


def _questions_record(
    engine: LLMEngine, args: argparse.Namespace, prefix: list[int], questions: list[list[int]]
) -> dict:
    before = _read_bytes(engine)
    hits_before = dict(engine.kv_stats().scheduler.kv_tiers.prefix_hit_tokens)  # type: ignore[union-attr]
    _sync()
    t0 = time.perf_counter()
    results = run_requests(engine, [prefix + q for q in questions], args.concurrency, args.new_tokens)
    wall = time.perf_counter() - t0
    stats = engine.kv_stats()
    hits = stats.scheduler.kv_tiers.prefix_hit_tokens  # type: ignore[union-attr]
    ttfts = [r["ttft_s"] for r in results]
    record = dict(
        ttft_p50_s=round(statistics.median(ttfts), 4),
        ttft_max_s=max(ttfts),
        ttft_s=ttfts,
        cached_tokens=[r["cached_tokens"] for r in results],
        hit_tokens_per_tier={t: hits.get(t, 0) - hits_before.get(t, 0) for t in hits},
        read_bytes_per_hit=(_read_bytes(engine) - before) // len(questions),
        questions_wall_s=round(wall, 3),
        first_tokens=results[0]["token_ids"],
    )
    if engine.persister is not None:
        store = engine.persister.store
        record.update(persist_loaded_blocks=store.num_loaded, persist_bytes_read=store.bytes_loaded)
    return record


def _cold_prefill(engine: LLMEngine, prefix: list[int], question: list[int], new_tokens: int) -> dict:
    _sync()
    (result,) = run_requests(engine, [prefix + question], 1, new_tokens)
    return dict(cold_ttft_s=result["ttft_s"], cold_tokens=result["token_ids"])


def _free_memory() -> None:
    """Give a dropped engine's memory back (its objects hold cycles) before the next one starts."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_phase(args: argparse.Namespace, phase: str) -> dict:
    if phase == "persist":
        if args.kv_persist_dir is None:
            raise SystemExit("the persist phase needs --kv-persist-dir")
        clear_dir(args.kv_persist_dir)  # the cold run must not find an earlier run's blocks
    if phase == "disk" and not (args.disk_kv_budget or args.num_disk_kv_blocks):
        raise SystemExit("the disk phase needs --disk-kv-budget (or --num-disk-kv-blocks)")
    engine = _engine(args, phase, persist=phase == "persist")
    prefix, questions = _prompts(args, engine.vocab_size)
    # The cold run asks a question outside the set, so each question's own tokens are computed.
    extra = torch.randint(
        0, engine.vocab_size, (args.question_tokens,), generator=torch.Generator().manual_seed(99)
    )
    record: dict[str, Any] = dict(
        phase=phase, **_cold_prefill(engine, prefix, extra.tolist(), args.new_tokens)
    )
    if phase == "persist":
        t0 = time.perf_counter()
        engine.close()  # every block written and fsynced
        record["persist_write_s"] = round(time.perf_counter() - t0, 3)
        del engine
        _free_memory()
        engine = _engine(args, phase, persist=True)  # the restart
    record.update(_questions_record(engine, args, prefix, questions))
    record["gpu_kv_gib"] = round(engine.bundle.storage.nbytes / GIB, 3)
    record["cpu_kv_gib"] = round(engine.bundle.storage.host_nbytes / GIB, 3)
    record["disk_kv_gib"] = round(engine.bundle.storage.disk_nbytes / GIB, 3)
    engine.close()
    return record  # the engine goes with this frame: main frees its memory


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    base = dict(
        shape=os.path.basename(args.model) if args.model else args.shape,
        ctx=args.ctx,
        questions=args.questions,
        concurrency=args.concurrency,
        card=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        date=datetime.date.today().isoformat(),
    )
    with open(args.out, "a") as f:
        for phase in args.phases:
            record = dict(base, **run_phase(args, phase))
            _free_memory()
            print(json.dumps(record), flush=True)
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
