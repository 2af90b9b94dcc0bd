"""The plan on a host without a CUDA GPU (plan/host_rates.py): the engine on the CPU, at the
CPU's measured (here: injected, never timed) rates, no line pretending a card, and every figure
that rests on a default said to be one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kvspill.config import EngineConfig
from kvspill.env import env_settings
from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, flag_plans, format_plan_table, host_rates, make_plan
from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.calibrate import load_calibration, save_calibration
from kvspill.plan.costs import cpu_decode_floor
from kvspill.plan.report import figure_source
from kvspill.plan.spec import KNOWN_SHAPES
from kvspill.plan.startup import startup_plan
from kvspill.plan.units import GiB
from kvspill.plan.weights import CPU_GGUF_READ_VS_GEMV, cpu_gguf_read_share

RATES = {
    "cpu_dtype": "float16",
    "cpu_gemv_gbs": 8.0,
    "cpu_gemm_tflops": 0.05,
    "cpu_layer_s": 0.4e-3,
    "cpu_kv_gbs": 6.0,
    "cpu_rates_at": "2026-12-02T01:00:00+00:00",
}


@pytest.fixture
def cpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A host with no CUDA GPU, its calibration dir empty, and no child process to measure."""
    monkeypatch.setenv("KVSPILL_CALIBRATION", str(tmp_path / "calibration.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(host_rates, "measure_cpu_rates_now", lambda: None)
    env_settings.cache_clear()
    yield tmp_path
    env_settings.cache_clear()


def _cache(rates: dict[str, object]) -> None:
    host_rates.save_cpu_rates(host_rates.cpu_host_key(), rates)


def test_no_cuda_visible_is_a_cpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert host_rates.host_has_cuda_gpu() is False


def test_a_cpu_hosts_plan_is_the_engine_on_the_cpu_at_the_cached_rates(cpu_host: Path) -> None:
    _cache(RATES)
    payload, plans, header = flag_plans.plans_for_flags(None, {})
    yours = plans["yours"]
    assert yours.request.device == "cpu" and yours.bandwidths.device == "cpu"
    # The embedded GGUF stays in its blocks where the CPU GGUF kernel builds (g++), else dense.
    in_blocks = host_rates.cpu_keeps_gguf_blocks()
    assert yours.request.weight_dtype == "float16" and yours.request.quantization == (
        "gguf" if in_blocks else "none"
    )
    assert yours.bandwidths.cpu_gemv_gbs == 8.0 and "quick measurement" in payload["bandwidths_source"]
    assert header[0].startswith("no CUDA GPU: the engine runs on the CPU (float16)")
    text = "\n".join([*header, format_plan_table(plans, with_advice=False)])
    for card_word in ("VRAM", "GPU KV", "weights on GPU", "RTX", "graphs+slack"):
        assert card_word not in text.replace("no CUDA GPU", ""), card_word
    assert "decode @ context (measured: quick measurement, 2026-12-02)" in text
    assert payload["plans"]["yours"]["figure_source"] == "measured: quick measurement, 2026-12-02"


def test_the_cpu_decode_step_is_weights_kv_and_layers_at_the_cpus_rates(cpu_host: Path) -> None:
    _cache(RATES)
    _, plans, _ = flag_plans.plans_for_flags(None, {"max_model_len": 4096})
    plan = plans["yours"]
    step = plan.decode
    share = plan.request.cpu_gguf_read_share  # GGUF blocks: read by the CPU kernel, not RAM-bound
    assert (share is not None) == (plan.request.quantization == "gguf")
    assert step.weights_s == pytest.approx(plan.weight_bytes / (8.0e9 * (share or 1.0)))
    assert step.gpu_kv_s == pytest.approx(4096 * plan.kv_bytes_per_token / 6.0e9)
    assert step.overhead_s == pytest.approx(plan.request.spec.num_layers * 0.4e-3)
    assert plan.decode_tok_s == pytest.approx(1 / (step.weights_s + step.gpu_kv_s + step.overhead_s))


def test_a_cpu_without_gxx_plans_the_gguf_dequantized(
    cpu_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cache(RATES)
    monkeypatch.setattr(host_rates, "cpu_keeps_gguf_blocks", lambda: False)
    _, plans, _ = flag_plans.plans_for_flags(None, {"max_model_len": 4096})
    dense = plans["yours"]
    monkeypatch.setattr(host_rates, "cpu_keeps_gguf_blocks", lambda: True)
    _, plans, _ = flag_plans.plans_for_flags(None, {"max_model_len": 4096})
    blocks = plans["yours"]
    assert (dense.request.quantization, blocks.request.quantization) == ("none", "gguf")
    assert blocks.weight_bytes < dense.weight_bytes / 2  # Q4_1 / Q8_0 blocks against fp16
    assert dense.decode.weights_s == pytest.approx(dense.weight_bytes / 8.0e9)
    # its Q4_1 projections and Q8_0 embedding (tied: the lm_head) each at their type's share
    share = blocks.request.cpu_gguf_read_share
    assert share is not None
    assert CPU_GGUF_READ_VS_GEMV["Q4_1"] < share < CPU_GGUF_READ_VS_GEMV["Q8_0"]
    assert blocks.decode.weights_s == pytest.approx(blocks.weight_bytes / (8.0e9 * share))


def test_the_cpu_kernels_share_weighs_a_files_types_by_their_bytes() -> None:
    spec = replace(
        KNOWN_SHAPES["llama-1b"],
        weight_dtype_bytes=None,  # a quantized file
        stored_weight_bytes=10**9,
        gguf_main_type="Q4_K",
        gguf_matmul_type_bytes=(("Q4_K", 600), ("Q6_K", 300), ("Q8_0", 100)),
    )
    seconds = 600 / CPU_GGUF_READ_VS_GEMV["Q4_K"] + 300 / CPU_GGUF_READ_VS_GEMV["Q6_K"] + 100 / 0.95
    assert cpu_gguf_read_share(spec, "gguf") == pytest.approx(1000 / seconds)
    assert cpu_gguf_read_share(spec, "none") is None  # dequantized at load: dense
    dense = KNOWN_SHAPES["llama-1b"]
    assert cpu_gguf_read_share(dense, "q8_0") == CPU_GGUF_READ_VS_GEMV["Q8_0"]  # a type to plan for
    assert cpu_gguf_read_share(dense, "awq") == CPU_GGUF_READ_VS_GEMV["Q4_1"]  # int4: as Q4_1 blocks
    assert cpu_gguf_read_share(dense, "q5_k_m") == CPU_GGUF_READ_VS_GEMV["Q4_K"]  # not measured
    assert cpu_gguf_read_share(dense, "none") is None


def test_cpu_decode_floor_charges_the_disk_tier_its_read_and_its_attention() -> None:
    rates = Bandwidths(cpu_gemv_gbs=10.0, cpu_kv_gbs=5.0, cpu_layer_s=1e-3, disk_read_gbs=2.0)
    floor = cpu_decode_floor(10**9, 10**9, 2 * 10**9, rates, num_layers=10)
    assert (floor.weights_s, floor.gpu_kv_s, floor.cold_kv_s, floor.disk_read_s) == pytest.approx(
        (0.1, 0.2, 0.4, 1.0)
    )
    assert floor.total_s == pytest.approx(0.1 + 0.2 + 0.4 + 1.0 + 0.01)


def test_without_a_measurement_the_figures_say_they_are_defaults(cpu_host: Path) -> None:
    _, plans, header = flag_plans.plans_for_flags(None, {})
    yours = plans["yours"]
    assert set(yours.bandwidths.filled) >= {"cpu_gemv_gbs", "cpu_gemm_tflops", "cpu_layer_s", "cpu_kv_gbs"}
    text = format_plan_table(plans, with_advice=False)
    assert "decode @ context (default, not measured: kvspill doctor --calibrate)" in text
    assert "TTFT @ context (default, not measured: kvspill doctor --calibrate)" in text
    assert "rates: defaults (not measured" in header[0]


def test_a_record_measured_another_way_is_measured_again(cpu_host: Path) -> None:
    _cache(RATES)
    assert host_rates.cached_cpu_rates() is not None  # saved with this method's stamp
    path = cpu_host / "cpu_rates.json"
    records = json.loads(path.read_text())
    records[host_rates.cpu_host_key()]["method"] = host_rates.CPU_RATES_METHOD - 1
    path.write_text(json.dumps(records))
    assert host_rates.cached_cpu_rates() is None  # e.g. its matmul rate in fp16, not a prefill's fp32


def test_a_gpu_plan_at_the_desktop_defaults_says_so() -> None:
    plan = make_plan(
        PlanRequest(spec=KNOWN_SHAPES["llama-1b"], vram_budget_bytes=16 * GiB, context_len=8192),
        DEFAULT_BANDWIDTHS,
    )
    assert figure_source(plan) == "default, not measured: kvspill doctor --calibrate"
    assert "decode @ context (default, not measured: kvspill doctor --calibrate)" in format_plan_table([plan])


def test_the_calibrations_cpu_rates_win_over_the_cache(cpu_host: Path) -> None:
    _cache(RATES)
    calibration = Bandwidths(
        cpu_gemv_gbs=20.0, cpu_gemm_tflops=0.5, cpu_layer_s=0.1e-3, cpu_kv_gbs=12.0, cpu_dtype="float32",
        cpu_attn_gbs=30.0, disk_read_gbs=1.5, measured_at="2026-12-01T00:00:00+00:00",
    )  # fmt: skip
    save_calibration(calibration)
    loaded = load_calibration()
    assert loaded is not None and loaded.cpu_kv_gbs == 12.0 and loaded.cpu_dtype == "float32"
    _, plans, _ = flag_plans.plans_for_flags(None, {})
    yours = plans["yours"]
    assert yours.bandwidths.cpu_gemv_gbs == 20.0 and yours.request.weight_dtype == "float32"
    assert yours.bandwidths.cpu_attn_gbs == 30.0  # what the runtime choices read, as the engine's
    assert figure_source(yours) == "measured: kvspill doctor --calibrate, 2026-12-01"


def test_a_vram_budget_or_a_known_card_plans_a_gpu(cpu_host: Path) -> None:
    _cache(RATES)
    _, by_budget, _ = flag_plans.plans_for_flags("llama-1b", {"vram_budget_bytes": 16 * GiB})
    _, by_card, _ = flag_plans.plans_for_flags("llama-1b", {}, gpu="h200")
    assert by_budget["yours"].request.device == "cuda" and by_card["yours"].request.device == "cuda"
    assert "not measured here" in figure_source(by_card["yours"])


def test_start_up_on_the_cpu_plans_with_the_same_rates(cpu_host: Path) -> None:
    _cache(RATES)
    startup = startup_plan(
        EngineConfig(max_model_len=2048, dtype="float16"),
        None,
        None,
        device="cpu",
        host_available_bytes=8 * GiB,
    )
    assert startup is not None
    assert startup.bandwidths.device == "cpu" and startup.bandwidths.cpu_layer_s == 0.4e-3
    assert "decode @ context (measured: quick measurement, 2026-12-02)" in startup.table
    assert "VRAM" not in startup.table


def test_a_failed_measurement_leaves_the_defaults_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSPILL_CALIBRATION", str(tmp_path / "calibration.json"))
    monkeypatch.setattr(host_rates.sys, "executable", str(tmp_path / "no-python"))  # the child cannot start
    env_settings.cache_clear()
    try:
        assert host_rates.measure_cpu_rates_now() is None
        rates = host_rates.cpu_host_bandwidths(None)
    finally:
        env_settings.cache_clear()
    assert rates.source.startswith("defaults") and "cpu_gemv_gbs" in rates.filled
