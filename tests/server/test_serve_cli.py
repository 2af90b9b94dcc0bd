"""`kvspill serve` wiring (flags, KVSPILL_* env vars) and SIGTERM draining in-flight requests."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli import serve_cmd

from .conftest import start_server


def _app() -> typer.Typer:
    app = typer.Typer()
    serve_cmd.register(app)

    @app.command()
    def _other() -> None:  # a second command so that `serve` stays a subcommand
        pass

    return app


def test_serve_flags_and_env_vars():
    group = typer.main.get_command(_app())
    serve = group.commands["serve"]  # type: ignore[attr-defined]
    opts = {o for p in serve.params for o in p.opts}
    for flag in ("--host", "--port", "--api-key", "--max-waiting-requests", "--shutdown-timeout", "--device",
                 "--max-model-len", "--cpu-kv-budget"):
        assert flag in opts, flag
    assert all(p.envvar and str(p.envvar).startswith("KVSPILL_") for p in serve.params)


def test_env_var_flags_are_validated():
    out = CliRunner().invoke(_app(), ["serve"], env={"KVSPILL_BLOCK_SIZE": "7"})
    assert out.exit_code == 2
    assert "--block-size" in out.output


def test_sigterm_lets_in_flight_request_finish(tiny_llama_dir: Path, tmp_path: Path):
    server = start_server(tiny_llama_dir, "--shutdown-timeout", "20", log=tmp_path / "server.log")
    result: list[httpx.Response] = []

    def request() -> None:
        result.append(httpx.post(server.url + "/v1/completions", timeout=60,
                                 json={"prompt": "hello", "max_tokens": 400, "ignore_eos": True}))

    t = threading.Thread(target=request)
    t.start()
    time.sleep(0.3)
    server.proc.send_signal(signal.SIGTERM)
    t.join(60)
    try:
        assert server.proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    assert result and result[0].status_code == 200
    assert result[0].json()["usage"]["completion_tokens"] == 400
    with pytest.raises(httpx.HTTPError):
        httpx.get(server.url + "/health", timeout=1)


def test_warns_without_api_key_beyond_loopback(monkeypatch, caplog):
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    with caplog.at_level("WARNING", logger="kvspill.serve"):
        out = CliRunner().invoke(_app(), ["serve", "--host", "0.0.0.0", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    assert calls and calls[0][1:3] == ("0.0.0.0", 8000)
    assert "without --api-key" in caplog.text
    caplog.clear()
    monkeypatch.setenv("KVSPILL_API_KEY", "k")
    monkeypatch.setenv("KVSPILL_PORT", "9001")
    out = CliRunner().invoke(_app(), ["serve", "--host", "0.0.0.0"])
    assert out.exit_code == 0, out.output
    assert calls[1][1:4] == ("0.0.0.0", 9001, "k")
    assert "without --api-key" not in caplog.text
