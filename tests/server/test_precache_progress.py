"""`POST /v1/precache` with `"stream": true`: progress events while the prefix prefills (counts
that only grow, up to the prompt), then the same result as the JSON answer, then [DONE]; a bad
body is still a JSON 400. In process over the tiny Llama (CPU), 16-token prefill chunks."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from inprocess_app import loaded_client

from kvspill.server import precache_routes

FILES = [{"path": f"src/m{i}.py", "content": f"def f{i}(x):\n    return x * {i}\n" * 6} for i in range(4)]


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    options = dict(
        model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=8, max_model_len=1024,
        num_kv_blocks=12, num_cpu_kv_blocks=400, hot_window_tokens=16, max_num_batched_tokens=16,
    )  # fmt: skip
    with loaded_client(options) as c:
        yield c


def _events(client: TestClient, body: dict) -> list[dict | str]:
    with client.stream("POST", "/v1/precache", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        payloads = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def test_streamed_precache_reports_its_prefill_then_the_result(client, monkeypatch):
    monkeypatch.setattr(precache_routes, "PROGRESS_S", 0.001)  # a report between every few steps
    events = _events(client, {"files": FILES})
    assert events[-1] == "[DONE]"
    result = events[-2]
    assert isinstance(result, dict) and result["object"] == "precache.result"
    progress = [e for e in events[:-2] if isinstance(e, dict)]
    assert all(e["object"] == "precache.progress" for e in progress)
    total = result["prompt_tokens"]
    assert total > 100 and {e["prompt_tokens"] for e in progress} == {total}
    counts = [e["prefilled_tokens"] for e in progress]
    assert counts[0] == 0 and counts[-1] == total and counts == sorted(counts)
    assert any(0 < c < total for c in counts), counts  # seen in the middle of the prefill
    assert result["cached_tokens"] == 0 and result["kept_tokens"] == total // 8 * 8
    again = client.post("/v1/precache", json={"files": FILES}).json()  # the JSON answer agrees
    assert again["prompt_tokens"] == total and again["cached_tokens"] == (total - 1) // 8 * 8


def test_a_bad_streamed_body_is_still_a_json_400(client):
    r = client.post("/v1/precache", json={"files": [], "stream": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "files", r.text
