"""The saved calibration: save/load round trip and the checks on a corrupt file (measuring:
tests/hardware/test_calibrate.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.plan import Bandwidths
from kvspill.plan.calibrate import load_calibration, save_calibration


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


def test_a_negative_cpu_fixed_time_is_refused(tmp_path: Path) -> None:
    path = save_calibration(Bandwidths(cpu_attn_gbs=35.0, cpu_attn_layer_s=-1.0), tmp_path / "c.json")
    with pytest.raises(InvalidParameterError, match="cpu_attn_layer_s"):
        load_calibration(path)
