"""The OpenAI-compatible server, driven by the official `openai` client and raw httpx, over one
real server process (tiny Llama on the CPU)."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from kvspill.stats import KVStats

from .conftest import start_server, stop_server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _greedy_text(client, server, prompt: str = "a b c d", max_tokens: int = 30) -> str:
    out = client.completions.create(model=server.model, prompt=prompt, max_tokens=max_tokens, temperature=0)
    return out.choices[0].text


def test_models_and_health(server, client):
    assert httpx.get(server.url + "/health").status_code == 200
    models = client.models.list()
    assert models.data[0].id == server.model
    raw = httpx.get(server.url + "/v1/models").json()
    assert raw["data"][0]["max_model_len"] == 1024


def test_completion_non_streaming(server, client):
    out = client.completions.create(model=server.model, prompt="the cat sat", max_tokens=7, temperature=0)
    assert out.object == "text_completion"
    assert out.choices[0].finish_reason in ("length", "stop")
    assert out.usage.prompt_tokens == 3
    assert 1 <= out.usage.completion_tokens <= 7


def test_completion_token_id_prompt(server, client):
    out = client.completions.create(model=server.model, prompt=[8, 9, 10], max_tokens=3, temperature=0)
    assert out.usage.prompt_tokens == 3


def test_completion_streaming_matches_non_streaming(server, client):
    full = _greedy_text(client, server)
    chunks = list(
        client.completions.create(
            model=server.model,
            prompt="a b c d",
            max_tokens=30,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    content = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in content) == full
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30


def test_chat_non_streaming_both_max_fields(server, client):
    for field in ("max_tokens", "max_completion_tokens"):
        out = client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "hi"}], temperature=0, **{field: 4}
        )
        assert out.object == "chat.completion"
        assert out.choices[0].message.role == "assistant"
        assert out.usage.completion_tokens <= 4


def test_chat_streaming_with_usage(server, client):
    stream = client.chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    content = [c for c in chunks if c.choices]
    assert content[-1].choices[0].finish_reason in ("length", "stop")
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.total_tokens == usage.usage.prompt_tokens + 6


def test_raw_sse_format(server):
    body = {"model": server.model, "prompt": "hello", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


def test_stop_string(server, client):
    full = _greedy_text(client, server)
    words = full.split()
    assert len(words) >= 2, full
    stop = words[1]
    out = client.completions.create(
        model=server.model, prompt="a b c d", max_tokens=30, temperature=0, stop=[stop]
    )
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].text == full[: full.index(stop)]
    assert stop not in out.choices[0].text


def test_seed_reproducible(server, client):
    kw = dict(
        model=server.model,
        prompt="the cat",
        max_tokens=20,
        temperature=1.0,
        top_p=0.9,
        extra_body={"top_k": 50, "min_p": 0.01},
    )
    a = client.completions.create(seed=7, **kw).choices[0].text
    b = client.completions.create(seed=7, **kw).choices[0].text
    assert a == b


def test_logprobs(server, client):
    out = client.completions.create(model=server.model, prompt="a b", max_tokens=4, temperature=0, logprobs=2)
    lp = out.choices[0].logprobs
    assert len(lp.token_logprobs) == out.usage.completion_tokens
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    chat = client.chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=3,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    assert len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens


def test_fim_suffix(server, client):
    out = client.completions.create(
        model=server.model, prompt="the cat", suffix="the mat", max_tokens=3, temperature=0
    )
    assert out.usage.prompt_tokens == 7  # prefix, 2 tokens, suffix, 2 tokens, middle


def test_context_length_exceeded(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="hello " * 1100, max_tokens=1)
    assert e.value.status_code == 400
    assert e.value.body["code"] == "context_length_exceeded"
    assert e.value.body["message"].startswith(
        "This model's maximum context length is 1024 tokens. However, your request has 1100 input tokens"
    )
    assert e.value.body["param"] == "prompt"  # the completions field (chat names messages)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="hello", max_tokens=5000)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=5000
        )
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "messages"


@pytest.mark.parametrize(
    "content",
    [
        b'{"prompt": "hi", ',
        b"not json",
        b'{"prompt": "hi", "max_tokens": "x"}',
        b'{"prompt": 5}',
        b'{"prompt": "hi", "temperature": -1}',
        b'{"prompt": "hi", "n": 0}',
        b'{"prompt": "hi", "n": 1000}',
        b'{"prompt": "hi", "echo": true, "stream": true}',
        b'{"prompt": "hi", "max_tokens": 0}',
        b'{"prompt": ["a", "b"], "n": 64}',
    ],
)
def test_bad_requests_are_400(server, content):
    r = httpx.post(
        server.url + "/v1/completions", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"


def test_bad_chat_is_400(server, client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "hi"}], n=0)
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": "hi"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_unknown_model_404(server, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt="hi", max_tokens=1)
    assert e.value.body["code"] == "model_not_found"


def test_tokenize_round_trip(server):
    ids = httpx.post(server.url + "/tokenize", json={"prompt": "hello world the cat"}).json()["tokens"]
    assert ids
    text = httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]
    assert "hello world the cat" in text
    assert httpx.post(server.url + "/detokenize", json={"tokens": [99999]}).status_code == 400


def test_metrics(server, client):
    client.completions.create(model=server.model, prompt="hi", max_tokens=2)
    text = httpx.get(server.url + "/metrics").text
    for name in (
        "kvspill:num_requests_running",
        "kvspill:num_requests_waiting",
        "kvspill:generation_tokens_total",
        f'kvspill:kv_blocks{{model_name="{server.model}",tier="gpu"}}',
        "kvspill:time_to_first_token_seconds_bucket",
        "kvspill:request_success_total",
    ):
        assert name in text, name


# The keys of `/v1/kv` as served before the typed records (kvspill/stats.py), from an idle server
# without cold tiers. `requests` (request ids) and `bytes_moved` (directions that moved) have
# data-dependent keys; every other object has exactly these, in this order.
V1_KV_KEYS = {
    "": ["block_size", "block_bytes", "tiers", "requests", "bytes_moved", "cold_attention_seconds",
         "max_cold_fraction", "scheduler", "runner"],
    "tiers": ["gpu", "cpu", "disk"],
    # + the prefix cache per tier (issue 14)
    "tiers.gpu": ["blocks", "used_blocks", "bytes", "used_bytes", "prefix_blocks", "prefix_bytes",
                  "prefix_hit_tokens", "prefix_hit_rate"],
    "cold_attention_seconds": ["cpu", "stream"],
    "scheduler": ["num_running", "num_waiting", "num_preemptions", "kv_cache_usage", "prefix_cache_queries",
                  "prefix_cache_hits", "prefix_cache_hit_rate", "num_gpu_blocks", "num_used_gpu_blocks",
                  "num_cpu_blocks", "num_used_cpu_blocks", "num_disk_blocks", "num_used_disk_blocks",
                  "kv_block_moves", "num_spilled_preemptions", "num_dropped_spills", "num_demoted_prefix_blocks",
                  "prefix_hit_tokens",
                  "prefix_cached_blocks", "prefix_query_tokens"],
    "scheduler.prefix_hit_tokens": ["gpu", "cpu", "disk"],
    "scheduler.prefix_cached_blocks": ["gpu", "cpu", "disk"],
    "scheduler.kv_block_moves": ["gpu->cpu", "cpu->disk", "gpu->disk", "cpu->gpu", "disk->gpu"],
    "runner": ["transfer_num_moves", "transfer_num_copies", "transfer_num_plans", "transfer_seconds",
               "transfer_copy_seconds", "cold_steps", "cold_cpu_fraction", "cold_cpu_bytes", "cold_cpu_seconds",
               "cold_stream_bytes", "cold_stream_seconds", "cold_stream_copy_seconds", "cold_stream_graph_bytes",
               "cold_sparse_selected_blocks",
               "cold_sparse_cold_blocks", "cold_sparse_bytes", "cold_sparse_seconds", "cold_summary_bytes"],
}  # fmt: skip


def test_v1_kv_keys_are_unchanged(server):
    kv = _wait_no_requests(server, 5.0)
    kv.pop("snapshot_age_s", None)  # only in an answer from the snapshot (a step was running)
    for path, keys in V1_KV_KEYS.items():
        obj = kv
        for part in filter(None, path.split(".")):
            obj = obj[part]
        # transfer_bytes_<direction> come first, one per direction that moved (none here today)
        assert [k for k in obj if not k.startswith("transfer_bytes_")] == keys, path
    for tier in ("cpu", "disk"):
        assert list(kv["tiers"][tier]) == V1_KV_KEYS["tiers.gpu"]
    assert kv["requests"] == {}
    assert all(isinstance(v, int) for v in kv["bytes_moved"].values())
    assert KVStats.from_json(kv).to_json() == kv  # what clients parse is what the server sent


def _generated(server) -> float:
    text = httpx.get(server.url + "/metrics").text
    return float(
        next(
            line.split()[-1]
            for line in text.splitlines()
            if line.startswith("kvspill:generation_tokens_total")
        )
    )


def _wait_no_requests(server, within: float) -> dict:
    deadline = time.monotonic() + within
    while True:
        kv = httpx.get(server.url + "/v1/kv").json()
        if not kv["requests"] or time.monotonic() > deadline:
            return kv
        time.sleep(0.05)


LONG = {"prompt": "hello " * 20, "max_tokens": 1000, "ignore_eos": True, "temperature": 1.0, "seed": 1}


def _aborted(server) -> float:
    """kvspill's and vLLM's request_success_total{finished_reason="abort"}, summed."""
    text = httpx.get(server.url + "/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if "request_success_total{" in line and 'finished_reason="abort"' in line
    )


def test_streaming_disconnect_aborts(server):
    before, aborted = _generated(server), _aborted(server)
    with httpx.stream(
        "POST", server.url + "/v1/completions", json={**LONG, "stream": True, "logprobs": 0}, timeout=30
    ) as r:
        lines = r.iter_lines()  # kept alive: a discarded iterator closes the response
        assert next(line for line in lines if line.startswith("data: "))
        assert httpx.get(server.url + "/v1/kv").json()["requests"], "the request should be running"
    kv = _wait_no_requests(server, 1.0)
    assert kv["requests"] == {}
    assert kv["tiers"]["gpu"]["used_blocks"] == 0
    time.sleep(0.2)
    assert _generated(server) - before < 900  # aborted, not run to its 1000 tokens
    assert _aborted(server) - aborted == 2  # counted once under each name (docs/metrics.md)


def test_non_streaming_disconnect_aborts(server):
    before, aborted = _generated(server), _aborted(server)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json=LONG, timeout=httpx.Timeout(30, read=0.15))
    kv = _wait_no_requests(server, 1.0)
    assert kv["requests"] == {}
    time.sleep(0.2)
    assert _generated(server) - before < 900
    assert _aborted(server) - aborted == 2


def test_concurrent_async_clients(server):
    import asyncio

    async def main() -> list[str]:
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)

        async def one(i: int) -> str:
            if i % 2:
                out = await aclient.completions.create(
                    model=server.model, prompt="a b c d", max_tokens=30, temperature=0
                )
                return out.choices[0].text
            stream = await aclient.completions.create(
                model=server.model, prompt="a b c d", max_tokens=30, temperature=0, stream=True
            )
            return "".join([c.choices[0].text async for c in stream if c.choices])

        return await asyncio.gather(*(one(i) for i in range(8)))

    texts = asyncio.run(main())
    assert len(set(texts)) == 1  # batched greedy runs agree with each other, streamed or not


# ---- several prompts and n > 1: one choice per prompt and sample, index = prompt_index * n + j ----


def test_completion_batch_of_prompts(server, client):
    prompts = ["the cat sat", "a b c d", "hello world"]
    singles = [
        client.completions.create(model=server.model, prompt=p, max_tokens=6, temperature=0) for p in prompts
    ]
    out = client.completions.create(model=server.model, prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert [c.text for c in out.choices] == [s.choices[0].text for s in singles]
    assert out.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles) == 9
    assert out.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    ids = client.completions.create(
        model=server.model, prompt=[[8, 9, 10], [11, 12]], max_tokens=2, temperature=0
    )
    assert [c.index for c in ids.choices] == [0, 1] and ids.usage.prompt_tokens == 5


def test_completion_batch_streaming(server, client):
    prompts = ["the cat sat", "a b c d"]
    full = client.completions.create(model=server.model, prompt=prompts, max_tokens=12, temperature=0)
    chunks = list(
        client.completions.create(
            model=server.model,
            prompt=prompts,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({c.id for c in chunks}) == 1
    texts: dict[int, str] = {}
    finished: dict[int, int] = {}
    for c in chunks[:-1]:
        (choice,) = c.choices
        texts[choice.index] = texts.get(choice.index, "") + choice.text
        if choice.finish_reason is not None:
            finished[choice.index] = finished.get(choice.index, 0) + 1
    assert texts == {c.index: c.text for c in full.choices}
    assert finished == {0: 1, 1: 1}
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == full.usage.model_dump()


def test_n_samples(server, client):
    kw = dict(model=server.model, prompt="the cat", max_tokens=12, temperature=1.0, seed=3, n=3)
    a = client.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert len({c.text for c in a.choices}) > 1  # seed + j per sample: the samples differ...
    assert [c.text for c in client.completions.create(**kw).choices] == [
        c.text for c in a.choices
    ]  # ...and replay
    assert a.usage.prompt_tokens == 2  # the prompt counts once, not once per sample
    greedy = client.completions.create(
        model=server.model, prompt=["the cat", "a b c d"], n=2, max_tokens=5, temperature=0
    )
    by_prompt = [_greedy_text(client, server, p, 5) for p in ("the cat", "a b c d")]
    assert [c.text for c in greedy.choices] == [by_prompt[0], by_prompt[0], by_prompt[1], by_prompt[1]]


def test_chat_n_streaming(server, client):
    chunks = list(
        client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": "hi"}],
            n=2,
            max_tokens=4,
            temperature=0,
            stream=True,
        )
    )
    assert [c.index for c in chunks[0].choices] == [0, 1]
    assert all(c.delta.role == "assistant" for c in chunks[0].choices)
    ends = [c.choices[0].index for c in chunks[1:] if c.choices[0].finish_reason is not None]
    assert sorted(ends) == [0, 1]


def test_group_that_can_never_fit_is_400(server, client):
    capacity = sum(t["blocks"] for t in httpx.get(server.url + "/v1/kv").json()["tiers"].values()) * 16
    n = capacity // 1001 + 1  # each sample may grow to 1001 tokens: together they never fit
    assert n <= 64, "the KV pool is too large for this test"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="hi", n=n, max_tokens=1000)
    assert f"need KV for {n * 1001} tokens together" in e.value.body["message"]


def test_fuzz_findings_are_400_or_finite(server):
    """Regressions of what the schemathesis run (test_fuzz.py) found: each used to be a 500."""
    r = httpx.post(server.url + "/tokenize", json={"messages": []})  # the chat template raised ValueError
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    # A vanishing penalty gives -inf logprobs, which JSON cannot carry; they are sent as -9999.0.
    r = httpx.post(
        server.url + "/v1/completions",
        json={"prompt": "hello", "logprobs": 1, "seed": 1, "repetition_penalty": 5e-324, "max_tokens": 4},
    )
    assert r.status_code == 200, r.text
    assert -9999.0 in r.json()["choices"][0]["logprobs"]["token_logprobs"]


def test_async_scheduling_server_answers_like_the_default(server, client, tiny_llama_dir, tmp_path):
    """A server with --async-scheduling (off by default on the CPU) gives the same answers: several
    prompts and n > 1 with seeds, a stop string, logprobs, a streamed chat."""
    requests = [
        dict(prompt=["a b c d", "the cat"], max_tokens=12, temperature=0.9, seed=5, n=2, logprobs=2),
        dict(prompt="a b c d", max_tokens=30, temperature=0, stop=[_greedy_text(client, server).split()[1]]),
    ]

    def answers(c):
        out = []
        for kw in requests:
            r = c.completions.create(model=server.model, **kw)
            out.append(
                [
                    (ch.index, ch.text, ch.finish_reason, ch.logprobs and ch.logprobs.token_logprobs)
                    for ch in r.choices
                ]
            )
        stream = c.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=10,
            temperature=0,
            stream=True,
        )
        out.append("".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices))
        return out

    async_server = start_server(tiny_llama_dir, "--async-scheduling", log=tmp_path / "server.log")
    try:
        async_client = openai.OpenAI(
            base_url=async_server.url + "/v1", api_key="unused", max_retries=0, timeout=60
        )
        got = answers(async_client)
    finally:
        stop_server(async_server)
    want = answers(client)
    for g, w in zip(got, want, strict=True):
        if isinstance(g, list):
            for (gi, gt, gf, glp), (wi, wt, wf, wlp) in zip(g, w, strict=True):
                assert (gi, gt, gf) == (wi, wt, wf)
                assert glp is None or glp == pytest.approx(wlp, abs=1e-4)
        else:
            assert g == w
