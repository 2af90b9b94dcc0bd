"""`kvspill monitor` through typer: --once --json without a GPU, JSON lines, logs, live view."""

from __future__ import annotations

import json
import socket
import sys

import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli import monitor_cmd
from kvspill.monitor.gpu import GpuSource

from .fakes import FakeGpuSource


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML, even on a GPU host
    app = typer.Typer()

    @app.command()
    def version() -> None:  # a second command, so `monitor` is a subcommand as in kvspill's app
        pass

    monitor_cmd.register(app)
    monitor_cmd.register(app)  # idempotent
    return app


def test_once_json_without_gpu_gives_host_figures(app):
    result = CliRunner().invoke(app, ["monitor", "--once", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["gpu"]["available"] is False
    assert "nvidia-ml-py" in record["gpu"]["reason"]
    assert record["gpu"]["devices"] == []
    host = record["host"]
    assert host["ram_total_bytes"] > 0 and 0 < host["ram_used_bytes"] <= host["ram_total_bytes"]
    assert host["swap_total_bytes"] >= 0 and host["swap_used_bytes"] >= 0
    assert record["server"] is None and record["alerts"] == []


def test_json_lines_with_count_and_log(app, tmp_path):
    log = tmp_path / "m.csv"
    result = CliRunner().invoke(
        app, ["monitor", "--json", "--count", "3", "--interval", "0.05", "--log", str(log)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert [json.loads(line)["session"]["num_refreshes"] for line in lines] == [1, 2, 3]
    assert len(log.read_text().strip().splitlines()) == 1 + 3  # header and one row per refresh


def test_unreachable_server_is_reported_not_fatal(app):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(app, ["monitor", "--once", "--json", "--url", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 0, result.output
    server = json.loads(result.output)["server"]
    assert server["ok"] is False and "refused" in server["error"].lower()


def test_live_view_runs_count_refreshes(app):
    result = CliRunner().invoke(app, ["monitor", "--count", "2", "--interval", "0.05", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "no GPU" in result.output and "RAM" in result.output
    assert "session: 2 refreshes, 0 alerts" in result.output


def test_bad_log_format_exits_2(app, tmp_path):
    result = CliRunner().invoke(
        app, ["monitor", "--once", "--log", str(tmp_path / "x"), "--log-format", "xml"]
    )
    assert result.exit_code == 2


@pytest.mark.parametrize(("flags", "num_bells"), [([], 2), (["--quiet"], 0)])
def test_live_view_prints_alert_lines_and_rings(app, monkeypatch, flags, num_bells):
    from rich.console import Console

    from kvspill.monitor import gpu

    bells: list[int] = []
    monkeypatch.setattr(Console, "bell", lambda self: bells.append(1))  # rich drops BEL off a terminal
    monkeypatch.setattr(gpu, "open_gpu_source", lambda: (FakeGpuSource([80, 86, 86, 91]), None))
    result = CliRunner().invoke(app, ["monitor", "--count", "4", "--interval", "0.05", *flags])
    assert result.exit_code == 0, result.output
    assert result.output.count("ALERT") >= 2  # the lines above the view (and the session panel)
    assert "crossed 85%" in result.output and "crossed 90%" in result.output
    assert len(bells) == num_bells  # once per refresh that raised alerts
    assert "session: 4 refreshes, 2 alerts" in result.output
    assert "peak 91.0%" in result.output


def test_the_fake_gpu_source_is_a_gpu_source() -> None:
    source: GpuSource = FakeGpuSource([50.0])  # mypy checks the fake against the product's protocol
    assert source.read()[0].used_bytes == 40 * 2**30
