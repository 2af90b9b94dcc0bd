"""Budget flags larger than the host are one line before anything loads: `serve` exits 1 before
it binds its port, `generate` exits 2 (its user errors' code) before the memory plan is made."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import psutil
import pytest
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.cli import main as cli_main


def _more_than_the_ram() -> str:
    return f"{psutil.virtual_memory().total // 2**30 + 64}GiB"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_with_a_cpu_tier_over_the_ram_is_one_line_and_exit_1(tiny_llama_dir: Path) -> None:
    port = _free_port()
    args = ["serve", str(tiny_llama_dir), "--device", "cpu", "--port", str(port)]
    out = CliRunner().invoke(serve_app(), [*args, "--cpu-kv-budget", _more_than_the_ram()])
    assert out.exit_code == 1, out.output
    assert out.output.count("\n") == 1, out.output
    assert out.output.startswith(f"error: --cpu-kv-budget {_more_than_the_ram()} is more than the ")
    assert "GiB of RAM available: " in out.output


def test_generate_with_a_cpu_tier_over_the_ram_stops_before_loading(
    tiny_llama_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = ["generate", "--model", str(tiny_llama_dir), "--device", "cpu", "hello"]
    with caplog.at_level(logging.INFO, logger="kvspill"):  # the plan is logged at info
        out = CliRunner().invoke(cli_main.app, [*args, "--cpu-kv-budget", _more_than_the_ram()])
    assert out.exit_code == 2, out.output
    assert out.output.count("\n") == 1 and "--cpu-kv-budget" in out.output, out.output
    assert "memory plan" not in caplog.text, "the plan comes after the budgets"
