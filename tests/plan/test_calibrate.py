"""Calibration: CPU measurement, save/load round trip, and the one place the env var is read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kvspill.env import DEFAULT_CALIBRATION_PATH, env_settings, read_env_settings
from kvspill.errors import InvalidParameterError
from kvspill.plan import Bandwidths
from kvspill.plan.calibrate import load_calibration, measure_bandwidths, run_calibration, save_calibration


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


def test_save_load_round_trip(tmp_path: Path) -> None:
    bw = Bandwidths(
        hbm_gbs=3000.0,
        h2d_gbs=55.0,
        d2h_gbs=54.0,
        cpu_attn_gbs=35.0,
        cpu_attn_layer_s=0.3e-3,
        disk_read_gbs=2.5,
        gpu_tflops=400.0,
        cpu_tflops=1.2,
        gpu_name="NVIDIA H100 80GB HBM3",
        gpu_total_bytes=85_520_809_984,
        measured_at="2026-11-26T01:02:03+00:00",
    )
    path = save_calibration(bw, tmp_path / "sub" / "calibration.json")
    loaded = load_calibration(path)
    assert loaded == replace(bw, source=f"calibration {path} 2026-11-26T01:02:03+00:00")
    assert "source" not in json.loads(path.read_text())


def test_load_missing_and_corrupt(tmp_path: Path) -> None:
    assert load_calibration(tmp_path / "none.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InvalidParameterError, match="kvspill doctor --calibrate"):
        load_calibration(bad)
    bad.write_text(json.dumps({"version": 1, "hbm_gbs": -3}))
    with pytest.raises(InvalidParameterError, match="hbm_gbs"):
        load_calibration(bad)


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


def test_a_negative_cpu_fixed_time_is_refused(tmp_path: Path) -> None:
    path = save_calibration(Bandwidths(cpu_attn_gbs=35.0, cpu_attn_layer_s=-1.0), tmp_path / "c.json")
    with pytest.raises(InvalidParameterError, match="cpu_attn_layer_s"):
        load_calibration(path)


def test_the_cpu_path_rate_and_fixed_time_come_from_two_sizes(monkeypatch) -> None:
    """The line through (16 blocks, t_few) and (n blocks, t_all): its slope is the rate, its value
    at 0 blocks the fixed time, per layer."""
    from kvspill.plan import calibrate

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
