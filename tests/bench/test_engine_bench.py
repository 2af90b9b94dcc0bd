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
