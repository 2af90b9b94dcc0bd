"""Start-up: named, timed phases; the warm-up runs real requests and leaves nothing behind."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvspill.engine.core import LLMEngine
from kvspill.engine.phases import StartupPhases, set_listener
from kvspill.engine.warmup import WARMUP_NEW_TOKENS, warmup_prompt_lengths, warmup_single_lengths
from kvspill.sampling_params import SamplingParams


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


def test_the_allocator_cap_keeps_this_process_memory_outside_torch_within_the_budget(
    monkeypatch, caplog
) -> None:
    """The budget is this process's: once loaded, torch's allocator gets the budget less what this
    process holds outside it (CUDA context, kernel images), never other processes' memory."""
    import types

    import torch

    from kvspill.config import EngineConfig
    from kvspill.engine import checks as engine_checks
    from kvspill.engine.checks import cap_allocator

    gib = 2**30
    card, reserved, outside = 80 * gib, 16 * gib, gib
    nvml: dict[str, object] = {"used": reserved + gib, "processes": 1}  # NVML names this process
    caps: list[tuple[float, int]] = []
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=card)
    )
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (card - reserved - outside, card))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: reserved)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: caps.append((f, i)))
    monkeypatch.setattr(engine_checks, "_nvml_process_memory", lambda i: (nvml["used"], nvml["processes"]))
    cuda, budget = torch.device("cuda", 0), EngineConfig(model="m", vram_budget_bytes=24 * gib)
    cap_allocator(budget, cuda)  # before loading: the plan's runtime estimate stands
    assert caps[-1] == pytest.approx((24 / 80, 0))
    cap_allocator(budget, cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx((23 / 80, 0))
    cap_allocator(EngineConfig(model="m", gpu_memory_utilization=0.5), cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx((39 / 80, 0))  # no budget: the card's share

    # 14 other processes hold 12 GiB: theirs, not this budget's (they left 0 bytes to each of 15 evals)
    outside, nvml["processes"] = 13 * gib, 15
    cap_allocator(budget, cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx((23 / 80, 0))
    # NVML cannot name this process (a PID namespace): one process listed is this one ...
    nvml["used"], nvml["processes"], outside = None, 1, gib
    cap_allocator(budget, cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx((23 / 80, 0))
    # ... among several, the plan's runtime reserve stands in for this process's share
    nvml["processes"], outside = 15, 13 * gib
    cap_allocator(budget, cuda, leave_runtime=True)
    assert caps[-1] == pytest.approx(((24 * gib - engine_checks.RUNTIME_RESERVE_BYTES) / card, 0))
    # never below what the allocator holds plus a step's temporaries: over the budget, with a warning
    nvml["used"], nvml["processes"] = reserved + 20 * gib, 1
    with caplog.at_level("WARNING", logger="kvspill.engine.setup"):
        cap_allocator(budget, cuda, leave_runtime=True, step_bytes=2 * gib)
    slack = engine_checks.ALLOCATOR_STEP_SLACK_BYTES  # a step's new segments beyond its bytes
    assert caps[-1] == pytest.approx(((18 * gib + slack) / card, 0))
    assert "14.06 GiB over the 24.00 GiB budget" in caplog.text
    cap_allocator(budget, torch.device("cpu"), leave_runtime=True)
    assert len(caps) == 7  # nothing to cap on the CPU


def test_nvml_process_memory_is_none_without_a_card() -> None:
    """No NVML or no such card: the lookup says it cannot tell, it never raises."""
    import torch

    from kvspill.engine.checks import _nvml_process_memory

    if torch.cuda.is_available():
        pytest.skip("a card is here: NVML may name this process")

    assert _nvml_process_memory(0)[0] is None


def test_the_plan_charges_other_processes_only_what_they_leave_short_of_the_budget(monkeypatch) -> None:
    """Runtime memory is this process's beyond its weights, plus the budget's part that other
    processes' memory leaves no room for (three 8 GiB engines on one card each found no room)."""
    import torch

    from kvspill.config import EngineConfig
    from kvspill.engine import checks as engine_checks

    gib = 2**30
    card, used, loaded = 80 * gib, 10 * gib, 8 * gib
    nvml: dict[str, object] = {"used": 9 * gib, "processes": 1}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (card - used, card))
    monkeypatch.setattr(engine_checks, "_nvml_process_memory", lambda i: (nvml["used"], nvml["processes"]))
    cuda, budget = torch.device("cuda", 0), EngineConfig(model="m", vram_budget_bytes=24 * gib)
    runtime = lambda config=budget: engine_checks.runtime_bytes_beside(config, cuda, loaded)  # noqa: E731
    assert runtime() == 2 * gib  # one process: the card's use is this one's (as before)
    nvml["processes"] = None
    nvml["used"] = None
    assert runtime() == 2 * gib  # NVML cannot tell: the card's use counts as this process's
    used, nvml["used"], nvml["processes"] = 30 * gib, 10 * gib, 15
    assert runtime() == 2 * gib  # 20 GiB of others leave 60 GiB: the 24 GiB budget is whole
    used = 70 * gib
    assert runtime() == 6 * gib  # 60 GiB of others leave 20 GiB: 4 GiB of the budget cannot be had
    assert runtime(EngineConfig(model="m", gpu_memory_utilization=0.5)) == 22 * gib  # 40 of 80, 20 left
