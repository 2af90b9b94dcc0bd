"""The CPU's default dtype is measured once per host and cached (plan/cpu_dtype.py)."""

from __future__ import annotations

import json

import pytest

from kvspill.plan import cpu_dtype


def test_the_dtype_that_serves_a_typical_request_faster() -> None:
    ms = 1e-3
    # This AVX-512 host unloaded (docs/performance-history.md): fp16 GEMV 5x faster, GEMM 2x slower.
    assert cpu_dtype.choose(fp16=(1 * ms, 170 * ms), fp32=(5 * ms, 88 * ms)) == "float16"
    # The AVX2-only host of issue 20: fp16 3-5x slower at both.
    assert cpu_dtype.choose(fp16=(12 * ms, 400 * ms), fp32=(4 * ms, 90 * ms)) == "float32"
    # Equal: fp16 (half the bytes of every tier and buffer).
    assert cpu_dtype.choose(fp16=(1 * ms, 1 * ms), fp32=(1 * ms, 1 * ms)) == "float16"
    # fp16 prefills run in fp32 (model/layers.cpu_widens): a slow fp16 GEMM does not count.
    assert cpu_dtype.choose(fp16=(2 * ms, 900 * ms), fp32=(3 * ms, 90 * ms)) == "float16"


def test_measured_once_then_read_from_the_cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_measure(dtype_name: str, repeats: int = 3) -> tuple[float, float]:
        calls.append(dtype_name)
        return (3.0, 3.0) if dtype_name == "float16" else (1.0, 1.0)

    monkeypatch.setattr(cpu_dtype, "measure_matmul_seconds", fake_measure)
    cache = tmp_path / "cpu_dtype.json"
    assert cpu_dtype.pick_cpu_dtype(cache) == "float32"
    assert cpu_dtype.pick_cpu_dtype(cache) == "float32"
    assert calls == ["float16", "float32"]  # the second start read the cache
    saved = json.loads(cache.read_text())
    assert saved[cpu_dtype._host_key()]["dtype"] == "float32"
    # Another host (or torch, or thread count) measures again, and keeps the first host's record.
    cache.write_text(json.dumps({"another host": saved[cpu_dtype._host_key()]}))
    assert cpu_dtype.pick_cpu_dtype(cache) == "float32" and len(calls) == 4
    assert set(json.loads(cache.read_text())) == {"another host", cpu_dtype._host_key()}
    assert cpu_dtype.pick_cpu_dtype(cache) == "float32" and len(calls) == 4
    # An unreadable cache (the one-record format of earlier versions too) measures again.
    cache.write_text(json.dumps({"host": "x", "dtype": "float16"}))
    assert cpu_dtype.pick_cpu_dtype(cache) == "float32" and len(calls) == 6


def test_the_real_measurement_returns_positive_times() -> None:
    gemv, gemm = cpu_dtype.measure_matmul_seconds("float32", repeats=1)
    assert 0 < gemv and 0 < gemm
