"""Calibration: CPU measurement, the CPU path's rate and fixed time, and the one place the env
var is read (measure, save to its path, read back)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvspill.env import DEFAULT_CALIBRATION_PATH, env_settings, read_env_settings
from kvspill.hardware.calibrate import measure_bandwidths, run_calibration
from kvspill.plan.calibrate import load_calibration


def test_cpu_measurement_is_positive(tmp_path: Path) -> None:
    # no wall-clock bound: a busy host (a CI neighbour) made a 5 s bound fail at 5.8 s
    bw = measure_bandwidths("cpu", disk_dir=tmp_path, quick=True)
    assert bw.cpu_attn_gbs is not None and bw.cpu_attn_gbs > 0
    assert bw.cpu_attn_layer_s is not None and 0 <= bw.cpu_attn_layer_s < 0.1  # its fixed time per layer
    assert bw.disk_read_gbs is not None and bw.disk_read_gbs > 0
    assert bw.cpu_tflops is not None and bw.cpu_tflops > 0
    assert bw.host_read_gbs is not None and bw.host_read_gbs > 0
    assert (bw.hbm_gbs, bw.h2d_gbs, bw.d2h_gbs, bw.gpu_tflops, bw.gpu_name) == (None,) * 5
    assert bw.measured_at and list(tmp_path.iterdir()) == []  # the temp file is gone


def test_env_var_sets_the_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_env_settings({}).calibration_path == Path(DEFAULT_CALIBRATION_PATH).expanduser()
    target = tmp_path / "cal.json"
    monkeypatch.setenv("KVSPILL_CALIBRATION", str(target))
    env_settings.cache_clear()
    try:
        assert env_settings().calibration_path == target
        bw = run_calibration(quick=True)  # measures (CPU here), saves to the env path, reads back
        assert target.is_file() and bw.source.startswith(f"calibration {target}")
        loaded = load_calibration()
        assert loaded is not None and loaded.cpu_attn_gbs == bw.cpu_attn_gbs
    finally:
        env_settings.cache_clear()


def test_the_cpu_path_rate_and_fixed_time_come_from_two_sizes(monkeypatch) -> None:
    """The line through (16 blocks, t_few) and (n blocks, t_all): its slope is the rate, its value
    at 0 blocks the fixed time, per layer."""
    from kvspill.hardware import calibrate

    block = 64 * 1024 * 4  # 64 KiB per block and layer, 4 layers
    rate, fixed = 50e9, 0.4e-3
    monkeypatch.setattr(
        calibrate,
        "_cold_path_seconds",
        lambda device, path, num_blocks, num_layers, attended: [
            n * block / rate + 4 * fixed for n in attended
        ],
    )
    gbs, layer_s = calibrate.measure_cpu_cold_path(torch.device("cpu"), 1024)
    assert gbs == pytest.approx(rate / 1e9) and layer_s == pytest.approx(fixed)


def test_the_prefill_rate_is_timed_in_the_dtype_a_prefill_computes_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvspill.hardware import cpu_rates

    seen: set[tuple[torch.dtype, torch.dtype]] = set()
    real = cpu_rates.dense_linear

    def spy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        seen.add((x.dtype, weight.dtype))
        return real(x, weight, bias)

    monkeypatch.setattr(cpu_rates, "dense_linear", spy)
    assert cpu_rates.gemm_tflops(torch.float16) > 0
    assert seen == {(torch.float32, torch.float16)}  # fp16 weights: x in fp32 (layers.cpu_widens)
    seen.clear()
    assert cpu_rates.gemm_tflops(torch.bfloat16) > 0
    assert seen == {(torch.bfloat16, torch.bfloat16)}
