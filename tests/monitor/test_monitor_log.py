"""CSV and JSON-lines logs: one row per refresh, the expected columns, format by suffix or flag."""

from __future__ import annotations

import csv
import json

import pytest

from kvspill.monitor.log import SnapshotLogger, resolve_format


def test_csv_has_one_row_per_refresh(tmp_path, make_session):
    path = tmp_path / "vram.csv"
    session = make_session([80, 86, 91], logger=SnapshotLogger(path))
    for _ in range(3):
        session.step()
    session.close()
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 3
    for column in (
        "timestamp",
        "time",
        "host_ram_used_bytes",
        "host_swap_used_bytes",
        "host_pinned_bytes",
        "gpu_available",
        "gpu0_used_bytes",
        "gpu0_total_bytes",
        "gpu0_used_percent",
        "gpu0_temperature_c",
        "gpu0_power_w",
        "gpu0_pcie_rx_bytes_per_s",
        "num_alerts",
    ):
        assert column in rows[0], column
    assert [float(r["gpu0_used_percent"]) for r in rows] == pytest.approx([80, 86, 91], abs=0.01)
    assert [r["num_alerts"] for r in rows] == ["0", "1", "1"]


def test_jsonl_has_one_snapshot_per_line(tmp_path, make_session):
    path = tmp_path / "vram.log"
    session = make_session([80, 86], logger=SnapshotLogger(path))
    session.step()
    session.step()
    session.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2
    assert set(records[0]) >= {"timestamp", "time", "gpu", "host", "server", "alerts"}
    assert records[0]["gpu"]["devices"][0]["used_percent"] == pytest.approx(80, abs=0.01)
    assert [a["level_percent"] for a in records[1]["alerts"]] == [85.0]


def test_format_by_suffix_or_flag(tmp_path):
    assert resolve_format(tmp_path / "a.CSV") == "csv"
    assert resolve_format(tmp_path / "a.jsonl") == "jsonl"
    assert resolve_format(tmp_path / "a.csv", "jsonl") == "jsonl"
    with pytest.raises(ValueError, match="log-format"):
        resolve_format(tmp_path / "a.csv", "xml")
