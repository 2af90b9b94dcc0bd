"""Admission control and auth on a second server: one running sequence, one waiting slot, an API key."""

from __future__ import annotations

import threading
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
    s = start_server(tiny_llama_dir, "--max-num-seqs", "1", "--max-waiting-requests", "1",
                     "--api-key", KEY, log=log)
    yield s
    stop_server(s)


def test_auth(busy_server):
    assert httpx.get(busy_server.url + "/health").status_code == 200
    r = httpx.get(busy_server.url + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(busy_server.url + "/v1/completions", json={"prompt": "hi"}, headers={"Authorization": "Bearer x"})
    assert r.status_code == 401
    bad = openai.OpenAI(base_url=busy_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(base_url=busy_server.url + "/v1", api_key=KEY, max_retries=0)
    assert good.completions.create(model=busy_server.model, prompt="hi", max_tokens=2).usage.completion_tokens


def test_queue_full_is_503(busy_server):
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        r = httpx.post(busy_server.url + "/v1/completions", headers=AUTH, timeout=60,
                       json={"prompt": "hello", "max_tokens": 100, "ignore_eos": True})
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
    assert 'kvspill:requests_rejected_total{reason="ServerBusyError"}' in metrics
