"""`kvspill serve-ray` on a local Ray (CPU): two replicas behind the prefix router answer the
openai client, a repeated prompt prefix keeps reaching one replica, and both replicas serve.
Skipped where Ray Serve is not installed (`pip install 'kvspill[ray]'`)."""

from __future__ import annotations

import socket

import httpx
import pytest

from kvspill.server.prefix_routing import pick_replica, prompt_prefix

pytest.importorskip("ray.serve")
openai = pytest.importorskip("openai")

PREFIX_CHARS = 40
KEY = "sk-test"
CONTEXT = "the cat sat on the mat hello world the cat sat on a mat "  # the shared "repository"


@pytest.fixture(scope="module")
def router_url(tiny_llama_dir):
    import ray
    from ray import serve

    from kvspill.cli.serve_ray_cmd import build_ray_app
    from kvspill.config import EngineConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=512)
        app = build_ray_app(config, "tiny", 2, PREFIX_CHARS, api_key=KEY)
        serve.run(app, name="kvspill", route_prefix="/")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        serve.shutdown()
        ray.shutdown()


def _complete(client, prompt: str):
    raw = client.completions.with_raw_response.create(
        model="tiny", prompt=prompt, max_tokens=4, temperature=0
    )
    return int(raw.headers["x-kvspill-replica"]), raw.parse()


@pytest.mark.slow
def test_two_replicas_behind_the_prefix_router(router_url):
    client = openai.OpenAI(base_url=router_url, api_key=KEY, max_retries=0, timeout=120)
    questions = ["hello", "world", "cat", "mat"]
    served = {_complete(client, CONTEXT + q)[0] for q in questions}
    assert served == {pick_replica(f'{{"prompt": "{CONTEXT}"}}'.encode(), 2, PREFIX_CHARS)}
    # prompts whose starts hash to each replica: both answer, each where the hash says
    starts = {
        pick_replica(f'{{"prompt": "{w} {CONTEXT}"}}'.encode(), 2, PREFIX_CHARS): w for w in questions * 2
    }
    assert set(starts) == {0, 1}, "pick test words that reach both replicas"
    for replica, word in starts.items():
        got, completion = _complete(client, f"{word} {CONTEXT}")
        assert got == replica and completion.choices[0].text is not None
    # a streamed chat completion comes through the router chunk by chunk
    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": CONTEXT}], max_tokens=4, stream=True
    )
    assert len(list(stream)) >= 2
    assert [m.id for m in client.models.list().data] == ["tiny"]
    refused = httpx.get(f"{router_url}/models", headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


def test_the_routing_key_is_the_prompt_start():
    assert prompt_prefix(b'{"prompt": "abcdef"}', 3) == "abc"
    chat = b'{"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]}'
    assert prompt_prefix(chat) == "<system>x<user>y"
    assert prompt_prefix(b"not json") is None and pick_replica(b"", 4) == 0
    same = [pick_replica(f'{{"prompt": "{CONTEXT}{q}"}}'.encode(), 8, PREFIX_CHARS) for q in "abcdefgh"]
    assert len(set(same)) == 1
