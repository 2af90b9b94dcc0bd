"""Start-up and mixed load on one engine (issue 20): how long until ready, the first request's
TTFT against steady TTFT, and short chats' ITL while long prompts prefill beside them.

    python -m kvspill.bench.mixed_bench --shape llama-3b --vram-budget 16GiB --cpu-kv-budget 40GiB \
        --target-itl-ms 0 auto --out $OUT/mixed.jsonl

For each `--target-itl-ms` value (0 = off, auto = the engine's default, or milliseconds) one
engine is built (timed, with its start-up phases), then:
1. first vs steady TTFT: one request of `--short-prompt` tokens, then `--steady` more, one at a
   time (TTFT = from add_request to the step that returns its first token);
2. mixed load: `--chats` requests of `--short-prompt` tokens decode; once each has
   `--settle` tokens, `--long` prompts of `--long-prompt` tokens arrive at once. Reported: the
   chats' inter-token gaps (ms) while any long prompt is still prefilling, and the long prompts'
   TTFT. Token ids only (random-weight shapes have no tokenizer); forced lengths (ignore_eos).
Needs CUDA; one JSON line per engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from kvspill.bench.engine_flags import add_engine_flags, engine_kwargs, token_count
from kvspill.bench.loadgen import latency_stats
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.sampling_params import SamplingParams


def _params(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, detokenize=False)


def _prompt(n: int, seed: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, vocab - 10, (n,), generator=g).tolist()


def _ttft(engine: LLMEngine, prompt: list[int], req_id: str) -> float:
    start = time.perf_counter()
    engine.add_request(prompt, _params(4), req_id=req_id)
    first = None
    for step in engine.run():
        for out in step.outputs:
            if out.req_id == req_id and first is None and out.token_ids:
                first = time.perf_counter() - start
    assert first is not None
    return first


def first_vs_steady(engine: LLMEngine, prompt_len: int, steady: int) -> dict:
    vocab = engine.vocab_size
    first = _ttft(engine, _prompt(prompt_len, 0, vocab), "first")
    rest = [_ttft(engine, _prompt(prompt_len, i + 1, vocab), f"steady-{i}") for i in range(steady)]
    median = sorted(rest)[len(rest) // 2]
    return {
        "first_ttft_s": round(first, 4),
        "steady_ttft_s": round(median, 4),
        "first_over_steady": round(first / median, 2),
    }


def mixed_load(engine: LLMEngine, args: argparse.Namespace) -> dict:
    vocab = engine.vocab_size
    last: dict[str, float] = {}
    counts: dict[str, int] = {}
    gaps: list[float] = []  # while a long prompt is prefilling
    all_gaps: list[float] = []
    long_first: dict[str, float] = {}
    for i in range(args.chats):
        engine.add_request(
            _prompt(args.short_prompt, 100 + i, vocab), _params(args.chat_tokens), req_id=f"chat-{i}"
        )
    long_added_at = None
    for step in engine.run():
        now = time.perf_counter()
        for out in step.outputs:
            if out.req_id.startswith("chat-"):
                n = len(out.token_ids)
                if out.req_id in last:
                    gap = [(now - last[out.req_id]) * 1e3] * max(1, n - counts.get(out.req_id, 0))
                    all_gaps += gap
                    if long_added_at is not None and len(long_first) < args.long:
                        gaps += gap
                last[out.req_id], counts[out.req_id] = now, n
            elif out.token_ids and out.req_id not in long_first and long_added_at is not None:
                long_first[out.req_id] = now - long_added_at
        if long_added_at is None and len(counts) == args.chats and min(counts.values()) >= args.settle:
            long_added_at = time.perf_counter()
            for j in range(args.long):
                engine.add_request(_prompt(args.long_prompt, 200 + j, vocab), _params(8), req_id=f"long-{j}")

    def rounded(values: list[float]) -> dict:
        return {k: (round(v, 2) if v is not None else None) for k, v in latency_stats(values).items()}

    return {
        "chat_itl_ms_during_prefill": rounded(gaps),
        "chat_itl_ms_all": rounded(all_gaps),
        "chat_gaps": len(gaps),
        "long_ttft_s": sorted(round(v, 3) for v in long_first.values()),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama-3b")
    add_engine_flags(
        ap, vram_budget="16GiB", cpu_kv_budget="0GiB", max_num_batched_tokens="4096", kernel_warmup=True
    )
    ap.add_argument(
        "--target-itl-ms", nargs="+", default=["0", "auto"], help="one engine each: 0 (off), auto or ms"
    )
    ap.add_argument("--short-prompt", type=int, default=512)
    ap.add_argument("--steady", type=int, default=5)
    ap.add_argument("--chats", type=int, default=8)
    ap.add_argument("--chat-tokens", type=int, default=400)
    ap.add_argument("--settle", type=int, default=16)
    ap.add_argument("--long", type=int, default=3)
    ap.add_argument("--long-prompt", type=token_count, default=32768)
    ap.add_argument("--skip-mixed", action="store_true", help="start-up and first/steady TTFT only")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def _engine(args: argparse.Namespace, target: str) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=f"random:{args.shape}",
            max_model_len=args.long_prompt + 1024,
            max_num_seqs=args.chats + args.long + 1,
            skip_tokenizer_init=True,
            target_itl_ms=None if target == "auto" else float(target),
            **engine_kwargs(args),
        )
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not torch.cuda.is_available():
        print("mixed_bench needs a CUDA GPU", file=sys.stderr)
        return 2
    for target in args.target_itl_ms:
        started = time.perf_counter()
        engine = _engine(args, target)
        row = {
            "card": torch.cuda.get_device_name(),
            "date": time.strftime("%Y-%m-%d"),
            "shape": args.shape,
            "target_itl_ms": target,
            "kernel_warmup": args.kernel_warmup,
            "ready_s": round(time.perf_counter() - started, 2),
            "startup_phases": {name: round(s, 2) for name, s in engine.startup_phases.durations},
            **first_vs_steady(engine, args.short_prompt, args.steady),
        }
        if not args.skip_mixed:
            row.update(mixed_load(engine, args))
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")
        del engine
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
