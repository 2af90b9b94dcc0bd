"""Pinned vs unpinned prefix under other traffic (issue 52): TTFT of the next request sharing it.

    python -m kvspill.bench.kv_pin_bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB \
        --ctx 64K --out $OUT/kv_pin.jsonl

Two cases, each on a fresh engine (random weights of the shape; the engine directly, through the
same cache operations the `/v1/kv/*` routes call: `LLMEngine.kv_pin`, `kv_move`, `kv_lookup`):
- `pinned`: a `--ctx`-token prefix is prefilled (its cold TTFT), pinned in the cpu tier, then other
  traffic runs (distinct prompts, enough tokens to cycle the gpu and cpu tiers); question 1 runs
  with the prefix where the pin kept it (cpu, attended in place); the prefix is moved to the gpu
  (`partial`: what fits), and question 2 runs.
- `unpinned`: the same prefix and traffic without the pin: the traffic evicts the prefix, and
  question 1 recomputes what is gone.
One JSON line per case: cold TTFT, pin and move times, blocks moved, where a lookup finds the
prefix before each question, each question's TTFT, cached tokens and greedy tokens (the pinned
and unpinned cases' first question sees the same prompt).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import time
from typing import Any

import torch

from kvspill.bench.engine_flags import add_engine_flags, engine_kwargs, token_count
from kvspill.bench.prefix_bench import run_requests
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine

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
        cpu_kv_budget="40GiB",
        max_num_batched_tokens="4096",
        hot_window_tokens="1024",
        block_size=16,
        num_kv_blocks=None,
        num_cpu_kv_blocks=None,
        kv_pin_share="0.5",
    )
    ap.add_argument("--ctx", type=token_count, default=65536, help="prefix tokens")
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument(
        "--other-tokens", type=token_count, default=None, help="per other request (default --ctx)"
    )
    ap.add_argument(
        "--other-requests",
        type=int,
        default=None,
        help="default: enough to pass the gpu and cpu tiers together",
    )
    ap.add_argument("--cases", nargs="+", default=["pinned", "unpinned"], choices=["pinned", "unpinned"])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "kv_pin.jsonl"))
    return ap.parse_args(argv)


def _engine(args: argparse.Namespace) -> LLMEngine:
    longest = max(args.ctx + args.question_tokens, args.other_tokens or args.ctx) + 2
    config = EngineConfig(
        model=args.model or f"random:{args.shape}",
        max_model_len=-(-longest // 1024) * 1024,
        max_num_seqs=1,
        skip_tokenizer_init=True,
        **engine_kwargs(args),
    )
    return LLMEngine(config)


def _tokens(vocab_size: int, n: int, seed: int) -> list[int]:
    return torch.randint(0, vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn: Any) -> tuple[Any, float]:
    _sync()
    t0 = time.perf_counter()
    result = fn()
    _sync()
    return result, round(time.perf_counter() - t0, 4)


def _ask(engine: LLMEngine, prompt: list[int], name: str) -> dict[str, Any]:
    """Where the prefix is found, then one question's TTFT, cached tokens and greedy tokens."""
    found = engine.kv_lookup(prompt).to_json()
    _sync()
    (result,) = run_requests(engine, [prompt], 1, 2)
    return {
        f"{name}_found_tokens": found["tiers"],
        f"{name}_ttft_s": result["ttft_s"],
        f"{name}_cached_tokens": result["cached_tokens"],
        f"{name}_tokens": result["token_ids"],
    }


def _traffic(engine: LLMEngine, args: argparse.Namespace) -> dict[str, Any]:
    """Distinct prompts enough to cycle the gpu and cpu tiers (what evicts an unpinned prefix)."""
    other = args.other_tokens or args.ctx
    tiers = engine.kv_stats().tiers
    held = (tiers.gpu.blocks + tiers.cpu.blocks) * engine.config.block_size
    count = args.other_requests if args.other_requests is not None else held // other + 2
    t0 = time.perf_counter()
    run_requests(engine, [_tokens(engine.vocab_size, other, 100 + i) for i in range(count)], 1, 1)
    return {
        "other_requests": count,
        "other_tokens": count * other,
        "traffic_s": round(time.perf_counter() - t0, 2),
    }


def run_case(args: argparse.Namespace, case: str) -> dict[str, Any]:
    engine = _engine(args)
    prefix = _tokens(engine.vocab_size, args.ctx, 0)
    questions = [_tokens(engine.vocab_size, args.question_tokens, seed) for seed in (1, 2)]
    _sync()
    (cold,) = run_requests(engine, [prefix + _tokens(engine.vocab_size, args.question_tokens, 3)], 1, 1)
    record: dict[str, Any] = {"case": case, "cold_ttft_s": cold["ttft_s"]}
    prefix_id = engine.kv_lookup(prefix).prefix_id
    if prefix_id is None:
        raise SystemExit("the filled prefix is not listed: is prefix caching on?")
    record["prefix"] = prefix_id
    if case == "pinned":
        pinned, record["pin_s"] = _timed(lambda: engine.kv_pin(prefix_id, "cpu"))
        record["pinned_blocks"] = pinned.num_blocks
    record.update(_traffic(engine, args))
    record.update(_ask(engine, prefix + questions[0], "q1"))
    if case == "pinned":
        moved, record["move_s"] = _timed(lambda: engine.kv_move(prefix_id, "gpu", partial=True))
        record["moved_blocks"] = moved.num_blocks
        record.update(_ask(engine, prefix + questions[1], "q2"))
    stats = engine.kv_stats()
    record.update(
        gpu_kv_gib=round(engine.bundle.storage.nbytes / GIB, 3),
        cpu_kv_gib=round(engine.bundle.storage.host_nbytes / GIB, 3),
        block_bytes=stats.block_bytes,
    )
    engine.close()
    return record


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    base = dict(
        shape=os.path.basename(args.model) if args.model else args.shape,
        ctx=args.ctx,
        card=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        date=datetime.date.today().isoformat(),
    )
    with open(args.out, "a") as f:
        for case in args.cases:
            record = dict(base, **run_case(args, case))
            gc.collect()  # the dropped engine's memory back before the next one starts
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            print(json.dumps(record), flush=True)
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
