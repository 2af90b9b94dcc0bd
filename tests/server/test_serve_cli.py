"""`kvspill serve` wiring (flags, KVSPILL_* env vars) and SIGTERM draining in-flight requests."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import typer
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.cli import serve_cmd

from .conftest import start_server


def test_serve_flags_and_env_vars():
    group = typer.main.get_command(serve_app())
    serve = group.commands["serve"]  # type: ignore[attr-defined]
    opts = {o for p in serve.params for o in p.opts}
    for flag in (
        "--host",
        "--port",
        "--api-key",
        "--max-waiting-requests",
        "--max-queued-tokens",
        "--shutdown-timeout",
        "--device",
        "--max-model-len",
        "--cpu-kv-budget",
    ):
        assert flag in opts, flag
    # --print-config is an action, not a setting: from the environment it would stop a service serving.
    settings = [p for p in serve.params if p.name != "print_config"]
    assert all(p.envvar and str(p.envvar).startswith("KVSPILL_") for p in settings)


def test_env_var_flags_are_validated():
    out = CliRunner().invoke(serve_app(), ["serve"], env={"KVSPILL_BLOCK_SIZE": "7"})
    assert out.exit_code == 2
    assert "--block-size" in out.output
    out = CliRunner().invoke(serve_app(), ["serve"], env={"KVSPILL_MAX_QUEUED_TOKENS": "0"})
    assert out.exit_code == 2 and "--max-queued-tokens" in out.output


def test_flags_the_service_cannot_run_with_exit_2_before_binding(tiny_llama_dir: Path):
    """Exit 2 (systemd's RestartPreventExitStatus) for a port out of range and a context past the
    model's RoPE, under --print-config too (what `kvspill service install` runs), not exit 1 after
    the port is bound and the model loaded."""
    for args in (["--port", "99999"], ["--port", "-1"]):
        out = CliRunner().invoke(serve_app(), ["serve", str(tiny_llama_dir), *args, "--print-config"])
        assert out.exit_code == 2 and "is not a TCP port" in out.output, out.output
    # the tiny Llama: 1024 positions (llama3 RoPE from 64)
    for extra in ([], ["--print-config"]):
        args = ["serve", str(tiny_llama_dir), "--device", "cpu", "--max-model-len", "2048", *extra]
        out = CliRunner().invoke(serve_app(), args)
        assert out.exit_code == 2 and "exceeds what this model's RoPE supports (1024" in out.output, (
            out.output
        )
    args = [
        "serve",
        str(tiny_llama_dir),
        "--device",
        "cpu",
        "--max-model-len",
        "2048",
        "--rope-scaling",
        "yarn:2",
    ]
    assert CliRunner().invoke(serve_app(), [*args, "--print-config"]).exit_code == 0


def test_sigterm_lets_in_flight_request_finish(tiny_llama_dir: Path, tmp_path: Path):
    server = start_server(tiny_llama_dir, "--shutdown-timeout", "20", log=tmp_path / "server.log")
    result: list[httpx.Response] = []

    def request() -> None:
        result.append(
            httpx.post(
                server.url + "/v1/completions",
                timeout=60,
                json={"prompt": "hello", "max_tokens": 400, "ignore_eos": True},
            )
        )

    t = threading.Thread(target=request)
    t.start()
    # SIGTERM once the request runs: one still on its way in is closed unanswered, as uvicorn
    # does on shutdown (a fixed 0.3 s sleep lost that race on a loaded 2-core CI machine)
    deadline = time.monotonic() + 20
    while not result and not httpx.get(server.url + "/v1/kv", timeout=5).json()["requests"]:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.05)
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


def _num_requests(server) -> int:
    """Requests the engine holds, running or waiting."""
    scheduler = httpx.get(server.url + "/v1/kv", timeout=5).json()["scheduler"]
    return int(scheduler["num_running"] + scheduler["num_waiting"])


def test_warns_without_api_key_beyond_loopback(monkeypatch, caplog):
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    with caplog.at_level("WARNING", logger="kvspill.serve"):
        out = CliRunner().invoke(serve_app(), ["serve", "--host", "0.0.0.0", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    assert calls and calls[0][1:3] == ("0.0.0.0", 8000)
    assert "without --api-key" in caplog.text
    caplog.clear()
    monkeypatch.setenv("KVSPILL_API_KEY", "k")
    monkeypatch.setenv("KVSPILL_PORT", "9001")
    out = CliRunner().invoke(serve_app(), ["serve", "--host", "0.0.0.0"])
    assert out.exit_code == 0, out.output
    assert calls[1][1:4] == ("0.0.0.0", 9001, "k")
    assert "without --api-key" not in caplog.text
    monkeypatch.delenv("KVSPILL_API_KEY")
    out = CliRunner().invoke(serve_app(), ["serve", "--allowed-origins", "*"])
    assert out.exit_code == 0 and "any web page a user opens can use this server" in caplog.text


def test_sigterm_aborts_requests_past_shutdown_timeout(tiny_llama_dir: Path, tmp_path: Path):
    """--shutdown-timeout 1 with far more than 1 s of work in flight (one running, three waiting;
    max_num_seqs 1): SIGTERM ends every request with a well-formed answer (the stream's error event
    and [DONE], or a 503) after about 1 s, and the process exits soon after."""
    server = start_server(
        tiny_llama_dir,
        "--shutdown-timeout",
        "1",
        "--max-num-seqs",
        "1",
        "--cpu-kv-budget",
        "16MiB",
        log=tmp_path / "server.log",
    )
    body = {"prompt": "hello", "max_tokens": 1000, "ignore_eos": True}
    streams: list[str] = []
    plain: list[httpx.Response] = []

    def stream() -> None:
        with httpx.stream(
            "POST", server.url + "/v1/completions", json={**body, "stream": True}, timeout=30
        ) as r:
            streams.append("".join(r.iter_text()))

    def post() -> None:
        plain.append(httpx.post(server.url + "/v1/completions", json=body, timeout=30))

    threads = [threading.Thread(target=f) for f in (stream, stream, stream, post)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    deadline = time.monotonic() + 20  # every request in (one that is not would get no answer)
    while _num_requests(server) < len(threads):
        assert time.monotonic() < deadline, "the requests never all arrived"
        time.sleep(0.05)
    sent = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(10)
        exited = time.monotonic() - sent
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a client hung"
    assert 0.9 <= exited <= 1 + 4, exited  # waited the timeout, then did not linger
    assert len(streams) == 3 and all(s.rstrip().endswith("data: [DONE]") for s in streams), streams
    aborted = [s for s in streams if "--shutdown-timeout" in s]
    assert aborted, "the waiting streams should have been aborted"
    assert all('"type": "unavailable"' in s for s in aborted)
    (r,) = plain
    assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable", r.text
    assert "--shutdown-timeout" in r.json()["error"]["message"]


def test_an_empty_api_key_is_refused_not_served_without_one(tiny_llama_dir: Path):
    """`--api-key ''` (or KVSPILL_API_KEY set to nothing) used to serve with no key at all."""
    for args, env in (
        (["--api-key", ""], {}),
        (["--api-key", "  "], {}),
        ([], {"KVSPILL_API_KEY": " "}),
    ):
        out = CliRunner().invoke(
            serve_app(), ["serve", str(tiny_llama_dir), *args, "--print-config"], env=env
        )
        assert out.exit_code == 2 and "--api-key is empty" in out.output, (args, env, out.output)


def test_quiet_endpoints_must_be_paths(tiny_llama_dir: Path):
    args = [
        "serve",
        str(tiny_llama_dir),
        "--disable-access-log-for-endpoints",
        "/health,metrics",
        "--print-config",
    ]
    out = CliRunner().invoke(serve_app(), args)
    assert out.exit_code == 2 and "start with '/'" in out.output and "'metrics'" in out.output, out.output


def test_allowed_origins_must_be_origins(tiny_llama_dir: Path):
    for value, message in (("app.example", "is not an origin"), ('["x"', "--allowed-origins")):
        out = CliRunner().invoke(
            serve_app(), ["serve", str(tiny_llama_dir), "--allowed-origins", value, "--print-config"]
        )
        assert out.exit_code == 2 and message in out.output, out.output


def test_several_served_model_names(monkeypatch, tiny_llama_dir: Path):
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    out = CliRunner().invoke(
        serve_app(), ["serve", str(tiny_llama_dir), "--served-model-name", "coder, coder-large"]
    )
    assert out.exit_code == 0, out.output
    assert calls[0][6] == "coder" and list(calls[0][13]) == ["coder-large"]
    out = CliRunner().invoke(serve_app(), ["serve", str(tiny_llama_dir), "--served-model-name", "a,,b"])
    assert out.exit_code == 2 and "has an empty name" in out.output


def test_uvicorn_log_level(monkeypatch, tiny_llama_dir: Path):
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    assert (
        CliRunner()
        .invoke(serve_app(), ["serve", str(tiny_llama_dir), "--uvicorn-log-level", "warning"])
        .exit_code
        == 0
    )
    assert calls[0][12].level == "warning" and calls[0][12].access
    out = CliRunner().invoke(serve_app(), ["serve", str(tiny_llama_dir), "--uvicorn-log-level", "loud"])
    assert out.exit_code == 2 and "--uvicorn-log-level must be one of" in out.output
