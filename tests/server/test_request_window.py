"""The per-request window fields (`hot_window_tokens`, `num_sink_blocks`) on /v1/completions and
/v1/chat/completions, in-process over the tiny Llama (CPU) with a cpu tier: `/v1/kv` shows each
running request's window (its own, else the server's flags); past the server's flags is a 400
naming the field and the limit; a negative value is a 400 too. And the Python API (`LLM.stream`,
`LLM.generate`) with the same fields in `SamplingParams`: a request without sinks lets its first
block leave the gpu, with the same greedy tokens (cold attention is exact)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from inprocess_app import loaded_client

from kvspill.errors import InvalidParameterError
from kvspill.sampling_params import SamplingParams
from kvspill.types import TIER_CPU, TIER_GPU

from ..tiered_llm import tiered_llm

SERVER_WINDOW = {"hot_window_tokens": 16, "num_sink_blocks": 2}  # the server's flags below


@pytest.fixture(scope="module")
def client(tiny_llama_dir: Path) -> Iterator[TestClient]:
    options = dict(
        model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=8, max_model_len=1024,
        num_kv_blocks=48, num_cpu_kv_blocks=16, max_num_batched_tokens=64, **SERVER_WINDOW,
    )  # fmt: skip
    with loaded_client(options) as c:
        yield c


def _windows_while_running(client: TestClient, bodies: list[tuple[str, dict[str, Any]]]) -> list[dict]:
    """Send the requests at once (threads), and return the `/v1/kv` request entries of the first
    poll that sees them all running. They run 64 steps together: polls answer between steps."""
    answers: list[Any] = []
    threads = [
        threading.Thread(target=lambda p=path, b=body: answers.append(client.post(p, json=b)))
        for path, body in bodies
    ]
    for t in threads:
        t.start()
    seen: list[dict] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(bodies) and time.monotonic() < deadline and any(t.is_alive() for t in threads):
        kv = client.get("/v1/kv")  # a 503 while a long first step runs and no snapshot exists yet
        seen = list(kv.json()["requests"].values()) if kv.status_code == 200 else []
        time.sleep(0.01)
    for t in threads:
        t.join(120)
    assert [a.status_code for a in answers] == [200] * len(bodies), [a.text for a in answers]
    return seen


def test_v1_kv_shows_each_running_requests_own_window_else_the_servers(client: TestClient) -> None:
    long = {"max_tokens": 64, "ignore_eos": True, "temperature": 0}
    seen = _windows_while_running(
        client,
        [
            ("/v1/completions", {"prompt": "one two three", **long, "hot_window_tokens": 0, "num_sink_blocks": 0}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], **long, "hot_window_tokens": 8}),
            ("/v1/completions", {"prompt": "four five six", **long}),
        ],
    )  # fmt: skip
    windows = sorted((r["hot_window_tokens"], r["num_sink_blocks"]) for r in seen)
    assert windows == [(0, 0), (8, 2), (16, 2)]  # the chat request keeps the server's 2 sink blocks
    assert all(r["status"] == "running" for r in seen)


@pytest.mark.parametrize(
    ("field", "value", "limit", "flag"),
    [("hot_window_tokens", 17, 16, "--hot-window-tokens"), ("num_sink_blocks", 3, 2, "--num-sink-blocks")],
)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_window_past_the_servers_flags_is_a_400_naming_the_field_and_the_limit(
    client: TestClient, path: str, field: str, value: int, limit: int, flag: str
) -> None:
    body = (
        {"prompt": "hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    )
    r = client.post(path, json={**body, "max_tokens": 2, field: value})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and error["type"] == "invalid_request_error"
    assert f"at most {limit} on this server (its {flag}), got {value}" in error["message"]
    assert client.post(path, json={**body, "max_tokens": 2, field: limit}).status_code == 200
    assert client.get("/v1/kv").json()["requests"] == {}  # nothing was left behind


def test_a_negative_window_is_a_400_and_the_fields_are_in_the_schema(client: TestClient) -> None:
    r = client.post("/v1/completions", json={"prompt": "hi", "num_sink_blocks": -1})
    assert r.status_code == 400 and "num_sink_blocks" in r.text
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("CompletionRequest", "ChatCompletionRequest"):
        assert {"hot_window_tokens", "num_sink_blocks"} <= set(schema[name]["properties"])


def test_the_python_api_takes_the_window_in_sampling_params(tiny_llama_dir: Path) -> None:
    """5 gpu blocks of 8 tokens (tiered_llm): a 57-token prompt spills from its first step. With the
    engine's window (1 sink block) block 0 never leaves the gpu; with no sink of its own it is the
    first to go. The greedy tokens are the same: cold attention is exact."""
    llm = tiered_llm(tiny_llama_dir)
    scheduler = llm.engine.scheduler

    def run(params: SamplingParams) -> tuple[list[int], set[int]]:
        sink_tiers: set[int] = set()
        for out in llm.stream(list(range(3, 60)), params):
            request = scheduler.get_request(out.req_id)  # None once finished
            if request is not None:
                _, block_tiers = scheduler.kv_tiers.get_block_table(request)
                sink_tiers.add(block_tiers[0] if block_tiers else TIER_GPU)
        return out.token_ids, sink_tiers

    greedy = {"temperature": 0.0, "max_tokens": 24, "ignore_eos": True}
    tokens, sink_tiers = run(SamplingParams(**greedy))
    assert len(tokens) == 24 and sink_tiers == {TIER_GPU}
    assert run(SamplingParams(**greedy, hot_window_tokens=0, num_sink_blocks=0)) == (tokens, {TIER_CPU})
    with pytest.raises(InvalidParameterError, match="hot_window_tokens: at most 8 on this server") as e:
        llm.generate([[1, 2, 3]], SamplingParams(**greedy, hot_window_tokens=9))
    assert e.value.param == "hot_window_tokens" and not scheduler.requests
