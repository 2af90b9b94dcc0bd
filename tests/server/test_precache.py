"""`POST /v1/precache` and `usage.prompt_tokens_details.cached_tokens`, in-process over the tiny
Llama (CPU) with a cpu tier: the precached prefix is found by the next completion that starts
with the same text, and that completion's usage reports the hit."""

from __future__ import annotations

import re

import pytest
from inprocess_app import loaded_client

FILES = [{"path": f"src/m{i}.py", "content": f"def f{i}(x):\n    return x * {i}\n" * 6} for i in range(4)]
TEMPLATE = "Repository:\n{files}\nAnswer about it.\n"


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    options = dict(
        model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=8, max_model_len=1024,
        num_kv_blocks=8, num_cpu_kv_blocks=200, hot_window_tokens=16, max_num_batched_tokens=64,
    )  # fmt: skip
    with loaded_client(options) as c:
        yield c


def test_precache_then_a_question_reports_the_cached_tokens(client):
    r = client.post("/v1/precache", json={"files": FILES, "prompt_template": TEMPLATE})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["cached_tokens"] == 0 and body["kept_tokens"] == body["prompt_tokens"] // 8 * 8 > 100
    prefix = TEMPLATE.replace("{files}", "".join(f"### {f['path']}\n{f['content']}" for f in FILES))
    q = client.post("/v1/completions", json={"prompt": prefix + "What does f2 return?", "max_tokens": 4})
    assert q.status_code == 200, q.text
    cached = q.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert (
        body["kept_tokens"] - 8 <= cached <= body["kept_tokens"]
    )  # the last block may tokenize across the seam
    again = client.post("/v1/precache", json={"files": FILES, "prompt_template": TEMPLATE}).json()
    assert again["cached_tokens"] == (again["prompt_tokens"] - 1) // 8 * 8  # all but the last token's block
    kv = client.get("/v1/kv").json()
    assert kv["scheduler"]["prefix_hit_tokens"]["cpu"] > 0
    cpu = kv["tiers"]["cpu"]
    assert (
        cpu["prefix_bytes"] == cpu["prefix_blocks"] * kv["block_bytes"] > 0 and 0 < cpu["prefix_hit_rate"] < 1
    )
    metrics = client.get("/metrics").text
    assert re.search(
        rf'kvspill:prefix_cache_bytes\{{model_name="[^"]+",tier="cpu"\}} {float(cpu["prefix_bytes"])}',
        metrics,
    )
    assert re.search(r'kvspill:prefix_cache_hit_rate\{model_name="[^"]+",tier="cpu"\}', metrics)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "files"),
        ({"files": FILES, "prompt": "x"}, "files"),
        ({"files": FILES, "prompt_template": "no placeholder"}, "prompt_template"),
        ({"files": []}, "files"),
    ],
)
def test_bad_precache_requests_are_400s_naming_the_param(client, body, param):
    r = client.post("/v1/precache", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
