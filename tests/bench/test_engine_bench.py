"""The engine benchmark's per-path cold figures over the timed decode span."""

from __future__ import annotations

import pytest

from kvspill.bench.engine_bench import _cold_paths
from kvspill.stats import ColdAttentionCounters


def test_cold_paths_are_the_span_differences_per_token() -> None:
    start = ColdAttentionCounters(cpu_bytes=10, cpu_seconds=1.0, stream_bytes=20, stream_copy_seconds=1.0)
    end = ColdAttentionCounters(
        cpu_bytes=10 + 3_000_000_000,
        cpu_seconds=1.0 + 0.1,
        stream_bytes=20 + 7_000_000_000,
        stream_copy_seconds=1.0 + 0.2,
    )
    figures = _cold_paths(start, end, tokens=4)
    assert figures["cold_cpu_share"] == pytest.approx(0.3)
    assert figures["cold_cpu_ms_per_token"] == pytest.approx(25.0)
    assert figures["cold_cpu_gbs"] == pytest.approx(30.0)
    assert figures["cold_stream_ms_per_token"] == pytest.approx(50.0)
    assert figures["cold_stream_gbs"] == pytest.approx(35.0)


def test_cold_paths_say_nothing_without_cold_bytes_or_counters() -> None:
    same = ColdAttentionCounters(cpu_bytes=5, stream_bytes=5)
    assert _cold_paths(same, same, tokens=4) == {}
    assert _cold_paths(None, same, tokens=4) == {}
    only_stream = ColdAttentionCounters(stream_bytes=1_000_000_000)
    figures = _cold_paths(ColdAttentionCounters(), only_stream, tokens=1)
    assert figures["cold_cpu_share"] == 0.0 and figures["cold_cpu_gbs"] is None
    assert figures["cold_stream_gbs"] is None  # no copy time resolved: no rate, not a division by 0


def test_the_sized_plan_is_taken_at_the_benchmarks_context() -> None:
    """`sized_plan_figures`: the plan that sized the engine's tiers, at the context the row timed
    (the engine's plan is made for max_model_len; its placement is the engine's own)."""
    from dataclasses import replace

    from kvspill.bench.plan_figures import sized_plan_figures
    from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, make_plan
    from kvspill.plan.spec import KNOWN_SHAPES

    request = PlanRequest(
        spec=KNOWN_SHAPES["llama-8b"],
        vram_budget_bytes=24 << 30,
        context_len=132_096,
        ram_budget_bytes=40 << 30,
        gpu_memory_utilization=1.0,
        measured_weight_bytes=16_160_000_000,  # what loading allocated, above the shapes' estimate
        measured_runtime_bytes=700 << 20,
    )
    sized = make_plan(request, DEFAULT_BANDWIDTHS)
    figures = sized_plan_figures(sized, 131_072, measured=5.0)
    hot, cold = figures["sized_plan_placement"]
    assert hot == sized.placed_gpu_tokens and hot + cold == 131_072  # its gpu tier, this context
    # ... and its RoPE table: the loaded model's (132,096 positions), not one of the row's context
    at_ctx = make_plan(replace(request, context_len=131_072, rope_positions=132_096), DEFAULT_BANDWIDTHS)
    assert figures["sized_plan_decode_tok_s"] == pytest.approx(at_ctx.decode_tok_s, abs=0.01)
    assert figures["sized_plan_vs_measured"] == pytest.approx(at_ctx.decode_tok_s / 5.0, abs=1e-3)
    assert figures["sized_plan_ttft_s"] == pytest.approx(at_ctx.ttft_s, abs=0.01)  # beside ttft_s
    assert figures["sized_runtime_gib"] == pytest.approx(700 / 1024, abs=1e-3)  # the measured runtime
    assert figures["sized_activation_gib"] == pytest.approx(sized.activation_peak_bytes / 2**30, abs=1e-3)
    startup = make_plan(
        replace(request, measured_weight_bytes=None, measured_runtime_bytes=None), DEFAULT_BANDWIDTHS
    )
    assert startup.placed_gpu_tokens > hot  # the estimate before loading holds more on the GPU


def test_prefill_progress_prints_how_far_a_long_prefill_got(monkeypatch, capsys):
    """A run cut off mid-prefill still says how many chunks it had done (stderr, once a period)."""
    from kvspill.bench import engine_bench

    clock = iter([100.0, 130.0, 161.0, 170.0, 222.0])
    monkeypatch.setattr(engine_bench.time, "perf_counter", lambda: next(clock))
    progress = engine_bench.PrefillProgress(t0=100.0, ctx=1_048_576, chunk=16384)
    for _ in range(5):
        progress.step()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "[bench] prefill 61 s: 2 chunks, ~32,768 of 1,048,576 tokens; peak gpu reserved 0.00 GiB",
        "[bench] prefill 122 s: 4 chunks, ~65,536 of 1,048,576 tokens; peak gpu reserved 0.00 GiB",
    ]


def test_run_context_times_each_token_of_the_one_loop(tiny_llama_dir, monkeypatch) -> None:
    """A row's request runs through `LLMEngine.run()`: every forced token is timed, the timed span
    is the tokens after the warm-up ones (on the CPU here, the CUDA memory calls stubbed)."""
    from kvspill.bench import engine_bench
    from kvspill.engine.core import LLMEngine

    stubs = {"synchronize": None, "reset_peak_memory_stats": None, "max_memory_allocated": 0,
             "max_memory_reserved": 0, "mem_get_info": (0, 0)}  # fmt: skip
    for name, value in stubs.items():
        monkeypatch.setattr(engine_bench.torch.cuda, name, lambda *a, _v=value, **k: _v)
    engine = LLMEngine(
        model=str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=256, max_num_batched_tokens=16
    )
    rec = engine_bench.run_context(engine, ctx=40, new_tokens=5, warmup_tokens=2, seed=0)
    assert rec["ok"] and rec["new_tokens"] == 5
    assert rec["ttft_s"] > 0 and rec["decode_tok_s"] > 0
    assert not engine.has_unfinished_requests()
