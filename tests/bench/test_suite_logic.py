"""The suites' rules on a scripted target (no engine): where progressive stops, when stability
fails, compare's row grid, and the input checks that say what to change."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from kvspill.bench.suites import compare, configs, progressive, stability
from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError


def _clock(step: float = 0.5):
    ticks = itertools.count()
    return lambda: next(ticks) * step


def test_progressive_stops_at_the_first_failure(scripted, tmp_path):
    target = scripted(
        fail=lambda spec, n: "OutOfMemoryError: CUDA out of memory" if spec.prompt_len >= 256 else None
    )
    result = progressive.run_progressive(target, [64, 128, 256, 512, 1024], new_tokens=4, warmup=False)
    assert [r["ctx"] for r in result.rows] == [64, 128, 256]
    assert [r["ok"] for r in result.rows] == [True, True, False]
    assert result.largest_stable_ctx == 128 and result.failed_ctx == 256 and result.passed
    assert [s.prompt_len for s in target.calls] == [64, 128, 256]  # 512 and 1024 never ran
    assert result.rows[0]["bytes_moved"] == 10  # the difference of the counters around one request
    lines = progressive.summary_lines(result, [64, 128, 256, 512, 1024])
    assert lines[0] == "largest stable context: 128 tokens" and "256" in lines[1]


def test_progressive_failing_at_the_first_context_does_not_pass(scripted):
    result = progressive.run_progressive(scripted(fail=lambda spec, n: "boom"), [64, 128], new_tokens=4)
    assert not result.passed and result.largest_stable_ctx is None and len(result.rows) == 1
    assert progressive.summary_lines(result, [64, 128])[0].startswith("FAILED at the first context (64")


def test_stability_fails_when_a_request_errors(scripted, tmp_path):
    target = scripted(fail=lambda spec, n: "http_500" if n == 7 else None)
    cfg = stability.StabilityConfig(duration_s=10, concurrency=2, min_ctx=16, max_ctx=64, new_tokens=4)
    result = stability.run_stability(target, cfg, clock=_clock())
    assert not result.passed
    assert result.errors == 1 and [r["err"] for r in result.rows if not r["ok"]] == ["http_500"]
    assert len(result.samples) >= cfg.min_samples and sum(s["errors"] for s in result.samples) == 1
    assert all(16 <= r["ctx"] <= 64 for r in result.rows)
    header = {"suite": "stability"}
    paths = stability.write_results(tmp_path, result, cfg, header, target.info())
    assert {p.name for p in paths} >= {
        "results.jsonl",
        "results.csv",
        "samples.csv",
        "stability.png",
        "report.md",
    }
    assert (
        "FAIL" in (tmp_path / "report.md").read_text() and "http_500" in (tmp_path / "report.md").read_text()
    )


def test_stability_passes_with_no_errors_and_flat_memory(scripted):
    cfg = stability.StabilityConfig(duration_s=10, concurrency=2, min_ctx=16, max_ctx=64, new_tokens=4)
    result = stability.run_stability(
        scripted(rss=lambda n: 1.0 + (0.3 if n < 6 else 0.0)), cfg, clock=_clock()
    )
    assert result.passed, stability.summary_lines(result)
    assert result.trends[0].growth_gib == 0.0 and result.trends[1].growth_gib is None  # no GPU figure


def test_stability_fails_on_upward_memory(scripted):
    cfg = stability.StabilityConfig(duration_s=10, concurrency=1, min_ctx=16, max_ctx=16, new_tokens=4)
    result = stability.run_stability(scripted(rss=lambda n: 1.0 + 0.1 * n), cfg, clock=_clock())
    assert result.errors == 0 and not result.passed
    assert result.trends[0].upward and result.trends[0].growth_gib > cfg.max_rss_growth_bytes / 2**30


def test_stability_stops_early_when_the_target_is_down(scripted):
    cfg = stability.StabilityConfig(duration_s=1000, concurrency=2, min_ctx=16, max_ctx=16, new_tokens=4)
    result = stability.run_stability(scripted(fail=lambda spec, n: "connect"), cfg, clock=_clock())
    assert not result.passed and len(result.samples) == cfg.max_failed_waves and result.stopped_early


def test_compare_rows_are_config_by_context_and_a_failed_start_is_a_row(scripted):
    def broken():
        raise RuntimeError("no room for the KV pool")

    made = [scripted(), scripted(fail=lambda spec, n: "OOM" if spec.prompt_len > 64 else None)]
    result = compare.run_compare(
        [("a", lambda: made[0]), ("b", lambda: made[1]), ("c", broken)], [32, 64, 128], 4
    )
    assert [(r["config"], r["ctx"]) for r in result.rows] == [(c, x) for c in "abc" for x in (32, 64, 128)]
    assert [r["ok"] for r in result.rows] == [True] * 3 + [True, True, False] + [False] * 3
    assert "no room for the KV pool" in result.rows[-1]["err"]
    assert all(t.closed for t in made)
    contexts, table = compare.pivot(result.rows, "decode_tok_s")
    assert contexts == [32, 64, 128] and table["b"] == {32: 100.0, 64: 100.0, 128: None}


def test_context_and_config_input_say_what_to_change():
    assert configs.parse_contexts("4K, 8K,16K") == [4096, 8192, 16384]
    assert configs.doubling_contexts(4096, 20000) == [4096, 8192, 16384, 20000]
    with pytest.raises(InvalidParameterError, match="ascending"):
        configs.parse_contexts("8K,4K")
    with pytest.raises(InvalidParameterError, match="raise --max-model-len"):
        configs.check_contexts([512, 1024], 16, 1024)
    with pytest.raises(InvalidParameterError, match="choose from default, extended"):
        configs.parse_config_names("default,fastest")
    with pytest.raises(InvalidParameterError, match="is empty"):
        configs.parse_config_names(" , ")
    assert configs.parse_config_names("weights-resident,weights-offload") == [
        "weights-resident",
        "weights-offload",
    ]
    assert configs.parse_url_labels(["a=http://h:1", "b=http://h:2"]) == [
        ("a", "http://h:1"),
        ("b", "http://h:2"),
    ]
    with pytest.raises(InvalidParameterError, match="LABEL=http"):
        configs.parse_url_labels(["a=h:1"])


def test_named_configurations_set_memory_knobs_within_the_cap(tiny_llama_dir):
    base = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="float32")
    sizing = configs.Sizing(
        max_tokens=300, host_ram_bytes=64 * 2**30, disk_free_bytes=2**40, tier_cap_bytes=2**20
    )
    extreme = configs.config_options("extreme", base, sizing, 2**30)
    assert extreme["mode"] == "extreme"
    # on the CPU device the pool is in RAM already (no cpu tier); extreme's disk tier, capped
    assert extreme["cpu_kv_budget_bytes"] == 0 and extreme["disk_kv_budget_bytes"] == 2**20
    assert configs.config_options(
        "default", base, dataclasses.replace(sizing, tier_cap_bytes=None), 2**30
    ) == {"mode": "default"}
    # 3 layers x K,V x 2 kv heads x 16 dims x 4 bytes, for 304 tokens (19 blocks of 16)
    assert configs.config_options("offload-on", base, sizing, 2**30) == {"cpu_kv_budget_bytes": 304 * 768}
    assert configs.config_options("offload-off", base, sizing, 2**30)["cpu_kv_budget_bytes"] == 0
    assert configs.config_options("stream", base, sizing, 2**30)["cold_attention"] == "stream"
    assert configs.config_options("cpu-attention", base, sizing, 2**30) == {"attention": "cpu"}
    assert configs.config_options("weights-resident", base, sizing, 2**30) == {"cpu_offload_gb": 0.0}
    # a quarter of the weights unless --cpu-offload-gb was given
    quarter = configs.config_options("weights-offload", base, sizing, 2**30)["cpu_offload_gb"]
    assert quarter == round(sum(p.numel() for p in _tiny_params(tiny_llama_dir)) * 4 / 4 / 2**30, 2)
    given = dataclasses.replace(base, cpu_offload_gb=3.0)
    assert configs.config_options("weights-offload", given, sizing, 2**30) == {"cpu_offload_gb": 3.0}


def _tiny_params(model_dir):
    from safetensors.torch import load_file

    return [t for path in model_dir.glob("*.safetensors") for t in load_file(str(path)).values()]


@pytest.mark.parametrize("preset", ["default", "extended", "extreme"])
def test_presets_sized_for_the_engine_length_pass_its_start_up_plan(preset):
    """A preset's tiers are sized for the length the engine's start-up plan checks (its whole
    --max-model-len), so every preset engine starts (W2 on a 16 GiB budget once refused with
    `default` sized for the contexts alone, 992 tokens short of --max-model-len)."""
    from dataclasses import replace

    from kvspill.plan.startup import startup_plan

    gib = 2**30
    config = EngineConfig(
        model="random:llama-3b",
        device="cuda",
        vram_budget_bytes=16 * gib,
        max_model_len=132096,
        max_num_batched_tokens=4096,
    )
    sizing = configs.Sizing(
        config.max_model_len, host_ram_bytes=128 * gib, disk_free_bytes=64 * gib, tier_cap_bytes=40 * gib
    )
    planned = startup_plan(
        replace(config, **configs.config_options(preset, config, sizing, 16 * gib)),
        143 * gib,
        "NVIDIA H200",
        None,
    )
    assert planned is not None and planned.plan.fits


@pytest.mark.slow
def test_an_isolated_configuration_runs_in_a_child_process_and_reports_its_rows(tiny_llama_dir):
    """The CUDA path of `bench compare`: each engine lives in a spawned child, rows come back;
    a configuration that cannot start in the child is a failed row, not a crash."""
    good = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=128)
    bad = EngineConfig(model=str(tiny_llama_dir / "missing"), device="cpu")
    result = compare.run_compare(
        [("child", compare.IsolatedEngine(good)), ("broken", compare.IsolatedEngine(bad))],
        [16, 32],
        new_tokens=2,
        warmup=False,
    )
    assert [(r["config"], r["ctx"], r["ok"]) for r in result.rows] == [
        ("child", 16, True),
        ("child", 32, True),
        ("broken", 16, False),
        ("broken", 32, False),
    ]
    assert result.infos["child"]["target"] == "in-process"
    assert "did not start" in result.rows[2]["err"]


def test_a_cold_tier_arm_that_moved_nothing_is_called_out():
    from kvspill.bench.suites.compare import unexercised_warnings

    rows = [
        {"config": "offload-off", "ctx": 4096, "ok": True, "bytes_moved": 0},
        {"config": "offload-on", "ctx": 4096, "ok": True, "bytes_moved": 0},
        {"config": "offload-on", "ctx": 65536, "ok": True, "bytes_moved": 1 << 30},
        {"config": "stream", "ctx": 65536, "ok": True, "bytes_moved": 1 << 30},
        {"config": "cold-cpu", "ctx": 4096, "ok": False, "bytes_moved": None},
    ]
    [warning] = unexercised_warnings(rows)
    assert warning.startswith("WARNING: offload-on moved 0 KV bytes") and "context 4096:" in warning


def test_plots_of_a_cpu_run_say_what_was_not_measured(tmp_path):
    from kvspill.bench.suites import plots

    rows = [
        {"ctx": c, "ok": True, "ttft_s": 0.1, "decode_tok_s": 50.0, "peak_gpu_gib": None, "host_rss_gib": 0.6 + c * 1e-7,
         "bytes_moved": 0, "device": "cpu"}
        for c in (32, 64, 128)
    ]  # fmt: skip
    path = plots.plot_by_context(tmp_path / "p.png", rows, "cpu run")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
