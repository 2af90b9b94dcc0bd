"""Start-up: named, timed phases; the warm-up runs real requests and leaves nothing behind."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvspill.engine import LLMEngine
from kvspill.engine_warmup import WARMUP_NEW_TOKENS, warmup_prompt_lengths, warmup_single_lengths
from kvspill.sampling_params import SamplingParams
from kvspill.startup_phases import StartupPhases, set_listener


def test_warmup_lengths_cover_two_chunks_and_fit_the_context_and_the_kv() -> None:
    lengths = warmup_prompt_lengths(chunk_tokens=512, max_model_len=4096, kv_capacity_tokens=10_000)
    assert lengths[0] > 512  # two prefill chunks: the second attends over the first
    assert 64 in lengths and any(n % 16 for n in lengths)
    short = warmup_prompt_lengths(chunk_tokens=512, max_model_len=128, kv_capacity_tokens=10_000)
    assert max(short) == 128 - WARMUP_NEW_TOKENS - 1
    assert len(short) == len(set(short))
    small_kv = warmup_prompt_lengths(chunk_tokens=512, max_model_len=4096, kv_capacity_tokens=300)
    assert small_kv and sum(small_kv) < 300 and all(n <= 100 for n in small_kv)
    assert warmup_prompt_lengths(chunk_tokens=512, max_model_len=4096, kv_capacity_tokens=10) == []
    assert warmup_single_lengths(512, 4096, 10_000) == [16, 32, 64, 128, 256, 512, 100]
    assert warmup_single_lengths(2048, 300, 10_000) == [16, 32, 64, 128, 256, 100]
    assert warmup_single_lengths(2048, 4096, 90) == [16, 32, 64]


def test_phases_are_timed_in_order_and_reported() -> None:
    seen: list[str] = []
    set_listener(seen.append)
    try:
        phases = StartupPhases()
        with phases.phase("a"):
            pass
        with pytest.raises(RuntimeError), phases.phase("b"):
            raise RuntimeError("boom")
    finally:
        set_listener(None)
    assert seen == ["a", "b"]
    assert [name for name, _ in phases.durations] == ["a", "b"]
    assert phases.summary().startswith("start-up ")


def test_warmup_leaves_no_trace_and_the_same_tokens(
    tiny_llama_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = dict(model=str(tiny_llama_dir), device="cpu", max_model_len=256, max_num_batched_tokens=64)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, detokenize=False)
    prompt = list(range(5, 40))
    with caplog.at_level(logging.INFO, logger="kvspill"):
        warm = LLMEngine(kernel_warmup=True, **options)
    names = [name for name, _ in warm.startup_phases.durations]
    assert names[0] == "device and pre-flight" and names[-1] == "warm-up"
    assert "load weights and tokenizer" in names
    assert any(r.getMessage().startswith("start-up ") for r in caplog.records)
    assert not warm.has_unfinished_requests()
    assert warm.scheduler.kv_cache_manager.num_free_blocks == warm.scheduler.kv_cache_manager.num_blocks
    assert warm.scheduler.kv_cache_manager.block_pool._cached_block_hash_to_block == {}
    cold = LLMEngine(kernel_warmup=False, **options)
    assert "warm-up" not in [name for name, _ in cold.startup_phases.durations]

    def run(engine: LLMEngine) -> list[int]:
        engine.add_request(prompt, params, req_id="r")
        out = []
        while engine.has_unfinished_requests():
            out = [o for o in engine.step() if o.finished] or out
        return out[0].token_ids

    assert run(warm) == run(cold)
