"""`/v1/kv/prefixes|lookup|pin|unpin|move|clear` in-process over the tiny Llama (CPU) with gpu, cpu and
disk tiers and a persist dir: a prefix moved between tiers serves the next request with the same
greedy tokens, pins are bounded by --kv-pin-share, every bad input is refused in OpenAI's shape
and counted in /metrics."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from inprocess_app import loaded_client

KEY = {"Authorization": "Bearer k"}
PROMPT = [(i * 7) % 200 + 3 for i in range(100)]  # 12 full blocks of 8
OTHER = [(i * 11) % 200 + 5 for i in range(100)]


@pytest.fixture(scope="module")
def client(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    persist = tmp_path_factory.mktemp("persist")

    options = dict(
        model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=8, max_model_len=512,
        num_kv_blocks=32, num_cpu_kv_blocks=64, num_disk_kv_blocks=32, hot_window_tokens=16,
        max_num_batched_tokens=64, kv_pin_share=0.25, kv_persist_dir=str(persist),
    )  # fmt: skip
    with loaded_client(options, api_key="k", headers=KEY) as c:
        yield c


def _complete(client: TestClient, prompt: list[int]) -> tuple[list[int], int]:
    r = client.post(
        "/v1/completions", json={"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 0}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    tokens = body["choices"][0]["logprobs"]["tokens"]
    return tokens, body["usage"]["prompt_tokens_details"]["cached_tokens"]


def _prefix_of(client: TestClient, prompt: list[int]) -> dict:
    r = client.post("/v1/kv/lookup", json={"prompt": prompt})
    assert r.status_code == 200, r.text
    return r.json()


def _post(client: TestClient, op: str, **body: object) -> dict:
    r = client.post(f"/v1/kv/{op}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_prefix_moved_to_disk_and_back_serves_the_same_greedy_tokens(client: TestClient) -> None:
    first, cached = _complete(client, PROMPT)
    assert cached == 0
    found = _prefix_of(client, PROMPT)
    assert found["prompt_tokens"] == 100 and found["cached_tokens"] == 96 and found["prefix"]
    prefix = found["prefix"]
    rows = client.get("/v1/kv/prefixes", params={"block_ids": True}).json()["data"]
    row = next(r for r in rows if r["prefix"] == prefix)
    assert row["tokens"] >= 96 and row["pinned"] is None and set(row["block_ids"]) == {"gpu", "cpu", "disk"}
    moved = _post(client, "move", prefix=prefix, tier="disk")
    assert moved["tier"] == "disk" and moved["blocks"] > 0 and moved["blocks_in_use"] == 0
    assert _prefix_of(client, PROMPT)["tiers"]["disk"] == 96
    assert _post(client, "move", prefix=prefix, tier="gpu")["blocks"] == row["tokens"] // 8
    assert _prefix_of(client, PROMPT)["tiers"] == {"gpu": 96, "cpu": 0, "disk": 0}
    again, cached = _complete(client, PROMPT)
    assert again == first and cached == 96


def test_pins_are_bounded_by_the_share_and_a_pinned_prefix_is_listed(client: TestClient) -> None:
    _complete(client, OTHER)
    prefix = _prefix_of(client, OTHER)["prefix"]
    pinned = _post(client, "pin", prefix=prefix, tier="cpu")
    assert pinned["tier"] == "cpu" and pinned["blocks"] >= 12
    assert _prefix_of(client, OTHER)["tiers"]["cpu"] == 96
    row = next(r for r in client.get("/v1/kv/prefixes").json()["data"] if r["prefix"] == prefix)
    assert row["pinned"] == "cpu"
    other = _prefix_of(client, PROMPT)["prefix"]
    r = client.post("/v1/kv/pin", json={"prefix": other, "tier": "cpu"})  # 16 of 64 cpu blocks may be pinned
    assert r.status_code == 409, r.text
    assert re.search(
        r"only \d+ blocks \(\d+ tokens\) of the cpu tier's pin share are free", r.json()["error"]["message"]
    )
    assert r.json()["error"]["code"] == "kv_conflict"
    assert _post(client, "unpin", prefix=prefix, tier="cpu")["blocks"] == pinned["blocks"]


def test_clear_drops_a_prefix_and_its_persisted_files(client: TestClient) -> None:
    _complete(client, PROMPT)
    prefix = _prefix_of(client, PROMPT)["prefix"]
    cleared = _post(client, "clear", prefix=prefix, persisted=True)
    assert cleared["blocks"] > 0 and cleared["persisted_files_removed"] > 0
    assert _prefix_of(client, PROMPT)["cached_tokens"] == 0
    assert client.post("/v1/kv/move", json={"prefix": prefix, "tier": "cpu"}).status_code == 404
    assert _post(client, "clear", all=True)["op"] == "clear"
    assert client.get("/v1/kv/prefixes").json()["data"] == []


@pytest.mark.parametrize(
    ("op", "body", "status", "param"),
    [
        ("pin", {"prefix": "00000000deadbeef", "tier": "cpu"}, 404, "prefix"),
        ("unpin", {"prefix": "00000000deadbeef", "tier": "cpu"}, 404, "prefix"),
        ("move", {"prefix": "00000000deadbeef", "tier": "gpu"}, 404, "prefix"),
        ("clear", {"prefix": "00000000deadbeef"}, 404, "prefix"),
        ("pin", {"prefix": "x"}, 400, None),  # no tier
        ("move", {"prefix": "x", "tier": "gpu", "extra": 1}, 400, None),
        ("move", {"prefix": "x", "tier": "gpu", "partial": "maybe"}, 400, None),
        ("lookup", {"prompt": []}, 400, "prompt"),
        ("lookup", {"prompt": 5}, 400, None),
        ("lookup", {"prompt": [1, -1]}, 400, "prompt"),  # outside the vocabulary
        ("lookup", {"prompt": [1, 1438687646924406465232896]}, 400, "prompt"),  # once a 500 (fuzz)
        ("clear", {}, 400, "prefix"),
        ("clear", {"prefix": "x", "all": True}, 400, "prefix"),
    ],
)
def test_bad_input_is_refused_in_openais_shape(
    client: TestClient, op: str, body: dict, status: int, param: str | None
) -> None:
    r = client.post(f"/v1/kv/{op}", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param


def test_a_tier_that_is_not_there_is_a_400_and_unpinning_an_unpinned_prefix_a_409(client: TestClient) -> None:
    _complete(client, PROMPT)
    prefix = _prefix_of(client, PROMPT)["prefix"]
    r = client.post("/v1/kv/move", json={"prefix": prefix, "tier": "nvme"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tier"
    r = client.post("/v1/kv/unpin", json={"prefix": prefix, "tier": "gpu"})
    assert r.status_code == 409 and "not pinned in the gpu tier" in r.json()["error"]["message"]


def test_the_routes_need_the_key_are_documented_and_counted(client: TestClient) -> None:
    assert client.get("/v1/kv/prefixes", headers={"Authorization": ""}).status_code == 401
    paths = client.get("/openapi.json").json()["paths"]
    for op in ("lookup", "pin", "unpin", "move", "clear"):
        assert "400" in paths[f"/v1/kv/{op}"]["post"]["responses"]
    assert "/v1/kv/prefixes" in paths
    client.post("/v1/kv/pin", json={"prefix": "00000000deadbeef", "tier": "cpu"})
    metrics = client.get("/metrics").text
    assert re.search(r'kvspill:kv_cache_ops_total\{model_name="tiny",op="pin",status="404"\} [1-9]', metrics)
    assert re.search(
        r'kvspill:kv_cache_ops_total\{model_name="tiny",op="lookup",status="200"\} [1-9]', metrics
    )
