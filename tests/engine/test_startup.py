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


def test_the_allocator_cap_keeps_the_memory_outside_torch_within_the_budget(monkeypatch) -> None:
    """The budget is for the whole card: once loaded, torch's allocator gets the budget less what
    is in use outside it (CUDA context, kernel images, other processes), measured then."""
    import types

    import torch

    from kvspill.config import EngineConfig
    from kvspill.engine_checks import cap_allocator

    gib = 2**30
    card, reserved, outside = 80 * gib, 16 * gib, gib
    caps: list[tuple[float, int]] = []
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=card)
    )
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (card - reserved - outside, card))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: reserved)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: caps.append((f, i)))
    cuda, budget = torch.device("cuda", 0), EngineConfig(model="m", vram_budget_bytes=24 * gib)
    cap_allocator(budget, cuda)  # before loading: the plan's runtime estimate stands
    assert caps[-1] == pytest.approx((24 / 80, 0))
    cap_allocator(budget, cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx((23 / 80, 0))
    cap_allocator(EngineConfig(model="m", gpu_memory_utilization=0.5), cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx((39 / 80, 0))  # no budget: the card's share
    outside = 30 * gib  # more outside than the budget (the plan refuses that first): no growth
    cap_allocator(budget, cuda, leave_runtime=True)
    assert caps[-1] == (0.0, 0)
    cap_allocator(budget, torch.device("cpu"), leave_runtime=True)
    assert len(caps) == 4  # nothing to cap on the CPU
