"""Admission control and auth on a second server: one running sequence, one waiting slot, an API key."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from .conftest import Server, start_server, stop_server

KEY = "sekrit"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def busy_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("busy") / "server.log"
    s = start_server(
        tiny_llama_dir, "--max-num-seqs", "1", "--max-waiting-requests", "1", "--api-key", KEY, log=log
    )
    yield s
    stop_server(s)


def test_auth(busy_server):
    assert httpx.get(busy_server.url + "/health").status_code == 200
    r = httpx.get(busy_server.url + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(
        busy_server.url + "/v1/completions", json={"prompt": "hi"}, headers={"Authorization": "Bearer x"}
    )
    assert r.status_code == 401
    bad = openai.OpenAI(base_url=busy_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(base_url=busy_server.url + "/v1", api_key=KEY, max_retries=0)
    assert good.completions.create(model=busy_server.model, prompt="hi", max_tokens=2).usage.completion_tokens


def test_status_reports_a_missing_or_wrong_key(busy_server):
    from typer.testing import CliRunner

    from kvspill.cli.main import _register_commands, app

    _register_commands()
    runner = CliRunner()
    missing = runner.invoke(app, ["status", "--url", busy_server.url])
    assert missing.exit_code == 1 and "needs an API key (HTTP 401)" in missing.output
    wrong = runner.invoke(app, ["status", "--url", busy_server.url, "--api-key", "nope"])
    assert wrong.exit_code == 1 and "refused the API key (HTTP 401)" in wrong.output
    good = runner.invoke(app, ["status", "--url", busy_server.url, "--api-key", KEY])
    assert good.exit_code == 0 and "ready" in good.output and busy_server.model in good.output


def test_queue_full_is_503(busy_server):
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        r = httpx.post(
            busy_server.url + "/v1/completions",
            headers=AUTH,
            timeout=60,
            json={"prompt": "hello", "max_tokens": 100, "ignore_eos": True},
        )
        with lock:
            responses.append(r)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) == {200, 503}, statuses
    busy = next(r for r in responses if r.status_code == 503)
    assert busy.headers["retry-after"]
    assert busy.json()["error"]["type"] == "server_busy" and busy.json()["error"]["code"] == "server_busy"
    metrics = httpx.get(busy_server.url + "/metrics").text
    assert re.search(
        r'kvspill:requests_rejected_total\{model_name="[^"]+",reason="ServerBusyError"\}', metrics
    )


@pytest.fixture(scope="module")
def token_bound_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("queued") / "server.log"
    # A cpu KV tier so that the KV admission rule leaves room for several 1000-token requests.
    s = start_server(
        tiny_llama_dir,
        "--max-num-seqs",
        "1",
        "--max-waiting-requests",
        "8",
        "--cpu-kv-budget",
        "16MiB",
        log=log,
        env={"KVSPILL_MAX_QUEUED_TOKENS": "40"},
    )  # the env var, as deployed
    yield s
    stop_server(s)


def _num_waiting(server: Server) -> int:
    return httpx.get(server.url + "/v1/kv").json()["scheduler"]["num_waiting"]


def test_queued_prompt_tokens_bound(token_bound_server):
    """Six 1-token streams of 1000 tokens hold the one running slot (max_num_seqs 1) and five wait;
    a 30-token prompt waits too (35 queued); another 20 tokens would pass the 40 queued tokens:
    503 + Retry-After; 2 more tokens fit; once the streams are closed the waiting ones are served."""
    url = token_bound_server.url
    done: list[httpx.Response] = []

    def post(prompt: str) -> threading.Thread:
        t = threading.Thread(
            target=lambda: done.append(
                httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=60)
            )
        )
        t.start()
        return t

    def wait_for(num_waiting: int) -> None:
        deadline = time.monotonic() + 10
        while httpx.get(url + "/v1/kv").json()["scheduler"]["num_waiting"] < num_waiting:
            assert time.monotonic() < deadline, f"expected {num_waiting} waiting requests"
            time.sleep(0.02)

    body = {"prompt": "hello", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    with contextlib.ExitStack() as streams:
        for _ in range(6):  # at least 6000 decode steps ahead: seconds, even at 1 ms a step
            streams.enter_context(httpx.stream("POST", url + "/v1/completions", json=body, timeout=30))
        waiting = [post("hello " * 30)]
        wait_for(6)
        r = httpx.post(url + "/v1/completions", json={"prompt": "hello " * 20, "max_tokens": 2}, timeout=10)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] and r.json()["error"]["code"] == "server_busy"
        assert "35 prompt tokens are already waiting" in r.json()["error"]["message"]
        waiting.append(post("hi hi"))
        wait_for(7)
    for t in waiting:  # closing the streams aborted them: the waiting requests run
        t.join(60)
    assert sorted(r.status_code for r in done) == [200, 200]
    metrics = httpx.get(url + "/metrics").text
    assert re.search(
        r'kvspill:requests_rejected_total\{model_name="[^"]+",reason="ServerBusyError"\} 1\.0', metrics
    )
