"""The app in-process (uvicorn in a thread) over a fake engine: 503 while loading, `: ping`
keep-alives while waiting for the first token, and a mid-stream step failure as an error event."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from inprocess_app import served

from kvspill.engine.client import EngineClient
from kvspill.sampling_params import SamplingParams
from kvspill.server import ServerSettings, create_app, serving
from kvspill.stats import KVStats, RequestTierStats
from kvspill.types import RequestOutput


class SlowEngine:
    """An `EngineClient` whose steps sleep `delay`; the step number `fail_at` raises."""

    max_model_len = 64
    context_shift = False
    vocab_size = 100
    tokenizer = None
    guided_compiler = None

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.delay = 0.0
        self.fail_at: int | None = None
        self.steps = 0

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        req_id: str | None = None,
        admission: bool = False,
    ) -> str:
        assert params is not None and params.max_tokens is not None and req_id is not None
        self.live[req_id] = params.max_tokens
        return req_id

    def abort_request(self, req_id: str) -> None:
        self.live.pop(req_id, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self.live)

    def kv_stats(self) -> KVStats:
        return KVStats(requests={r: RequestTierStats("running") for r in self.live})

    def encode(self, prompt: str) -> list[int]:
        return [1] * len(prompt.split())

    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        return self.encode(prompt) if isinstance(prompt, str) else list(prompt)

    def kv_tokens_needed(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        return num_prompt_tokens + (params.max_tokens or 0)

    def kv_capacity_tokens(self) -> int:
        return 1000

    def step(self) -> list[RequestOutput]:
        time.sleep(self.delay)
        self.steps += 1
        if self.fail_at is not None and self.steps == self.fail_at:
            raise RuntimeError("simulated out of memory")
        outs = []
        for req_id in list(self.live):
            self.live[req_id] -= 1
            done = self.live[req_id] == 0
            outs.append(
                RequestOutput(
                    req_id,
                    None,
                    [1],
                    text="x",
                    delta_text="x",
                    delta_token_ids=[5],
                    token_ids=[5],
                    finished=done,
                    finish_reason="length" if done else None,
                )
            )
            if done:
                del self.live[req_id]
        return outs


def test_the_fake_is_an_engine_client() -> None:
    engine: EngineClient = SlowEngine()  # mypy checks the fake against the server's interface
    assert isinstance(engine, EngineClient)


@pytest.fixture
def app_server(monkeypatch) -> Iterator[tuple[str, SlowEngine, threading.Event]]:
    monkeypatch.setattr(serving, "PING_S", 0.1)
    engine, loaded = SlowEngine(), threading.Event()

    def factory() -> SlowEngine:
        loaded.wait(10)
        return engine

    with served(create_app(factory, ServerSettings("fake"))) as url:
        yield url, engine, loaded
        loaded.set()


BODY = {"prompt": [1, 2, 3], "max_tokens": 3, "stream": True}


def test_unavailable_until_loaded(app_server):
    url, _, loaded = app_server
    r = httpx.get(url + "/health")
    assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable"
    r = httpx.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2})
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
    for route in ("/v1/models", "/v1/models/fake"):  # clients poll it for readiness too
        r = httpx.get(url + route)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", route
    loaded.set()
    deadline = time.monotonic() + 5
    while httpx.get(url + "/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    r = httpx.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "x"
    assert httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"] == 64


def _wait_ready(url: str) -> None:
    while httpx.get(url + "/health").status_code != 200:
        time.sleep(0.02)


def test_ping_while_waiting_for_first_token(app_server):
    url, engine, loaded = app_server
    loaded.set()
    _wait_ready(url)
    engine.delay = 0.35
    text = httpx.post(url + "/v1/completions", json=BODY, timeout=10).text
    assert text.startswith(": ping\n\n")
    assert text.rstrip().endswith("data: [DONE]")


def test_step_failure_mid_stream(app_server):
    url, engine, loaded = app_server
    loaded.set()
    _wait_ready(url)
    engine.fail_at = engine.steps + 2
    text = httpx.post(url + "/v1/completions", json=BODY, timeout=10).text
    events = [e for e in text.split("\n\n") if e.startswith("data: ")]
    assert '"error"' in events[-2] and "server_error" in events[-2]
    assert events[-1] == "data: [DONE]"
    r = httpx.post(url + "/v1/completions", json={**BODY, "stream": False}, timeout=10)
    assert r.status_code == 200  # the loop survived
