"""The concurrent GPU benchmark's accounting, on the CPU with a tiny model: every request gets its
tokens, and aggregate decode counts only steps where all N requests decoded one token each."""

from __future__ import annotations

from kvspill.bench.concurrent_bench import run_concurrent
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine


def _engine(model_dir, **config) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model_dir), device="cpu", dtype="float32", **config))


def test_run_concurrent_counts_all_n_decode_steps(tiny_llama_dir):
    engine = _engine(tiny_llama_dir, max_model_len=256, max_num_batched_tokens=32)
    n, ctx, new, warmup = 3, 40, 6, 1
    rec = run_concurrent(engine, ctx, n, new, warmup, seed=0)
    mixed = (n - 1) * (-(-ctx // 32) + 1)  # the budget each request gets for decoding during prefills
    assert rec["ok"] and rec["concurrency"] == n
    assert rec["output_tokens"] == n * (1 + warmup + new + mixed)
    # Once all three are past warm-up they decode together until the first finishes.
    assert rec["pure_decode_steps"] >= new and rec["decode_tok_s"] > 0
    assert rec["ttft_ms"]["p50"] is not None and rec["itl_ms"]["p99"] >= rec["itl_ms"]["p50"]
    assert rec["peak_gpu_gib"] is None  # no CUDA here


def test_budgets_cover_prefill_at_the_itl_caps_floor(tiny_llama_dir):
    # With an ITL target the engine starts prefill at the budget's floor (256 tokens a step while
    # requests decode), not the whole chunk: the first request decodes through more mixed steps,
    # and a budget sized by the chunk ran out before all three decoded together.
    engine = _engine(
        tiny_llama_dir,
        max_model_len=1024,
        max_num_batched_tokens=1024,
        target_itl_ms=0.001,  # never met on the CPU: the cap stays at its floor
    )
    floor = engine.scheduler.prefill_token_cap
    assert floor is not None and floor < 1024
    n, ctx, new, warmup = 3, 3 * floor, 6, 1
    rec = run_concurrent(engine, ctx, n, new, warmup, seed=0)
    assert rec["ok"] and rec["pure_decode_steps"] >= new
