"""vLLM's request extras that clients of vLLM send: `chat_template_kwargs` (Qwen3's
`enable_thinking`), `add_generation_prompt`, `continue_final_message`, `stop_token_ids`,
`include_stop_str_in_output`, `skip_special_tokens`, `allowed_token_ids`, `bad_words`,
`truncate_prompt_tokens`, `prompt_logprobs`; over one real server process (tiny Llama on
the CPU) whose chat template reads a template variable."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kvspill.guided.bounded_json import MAX_JSON_DEPTH

from .conftest import start_server, stop_server

# The tiny tokenizer's ids (tests/conftest.py): specials first, then words.
IM_START, IM_END, HELLO, CAT = 3, 4, 8, 12

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant"
    "{% if enable_thinking is defined and not enable_thinking %} hello{% endif %}{% endif %}"
)
USER = [{"role": "user", "content": "hi"}]


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.fixture(scope="module")
def server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("extras")
    template = folder / "template.jinja"
    template.write_text(TEMPLATE)
    log = folder / "server.log"
    s = start_server(
        tiny_llama_dir,
        "--chat-template",
        str(template),
        "--disable-access-log-for-endpoints",
        "/health,/x",
        log=log,
    )
    s.log = log  # type: ignore[attr-defined]
    yield s
    stop_server(s)


def _tokens(server, **body) -> list[int]:
    r = httpx.post(server.url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def _chat(server, **body) -> httpx.Response:
    return httpx.post(server.url + "/v1/chat/completions", json={"model": server.model, **body}, timeout=60)


def _completion(server, **body) -> dict:
    body = {"model": server.model, "prompt": "the cat", "temperature": 0, **body}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_template_kwargs_reach_the_template(server):
    plain = _tokens(server, messages=USER)
    thinking_off = _tokens(server, messages=USER, chat_template_kwargs={"enable_thinking": False})
    assert thinking_off == plain + [HELLO]
    assert _tokens(server, messages=USER, chat_template_kwargs={"enable_thinking": True}) == plain
    # the chat route renders the same prompt: its usage counts it
    r = _chat(server, messages=USER, max_tokens=1, chat_template_kwargs={"enable_thinking": False})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(thinking_off)


def test_add_generation_prompt_and_continue_final_message(server):
    plain = _tokens(server, messages=USER)
    without = _tokens(server, messages=USER, add_generation_prompt=False)
    assert plain[-1] != IM_END and without[-1] == IM_END and plain[: len(without)] == without
    partial = [*USER, {"role": "assistant", "content": "the cat"}]
    continued = _tokens(server, messages=partial, add_generation_prompt=False, continue_final_message=True)
    assert continued[-1] == CAT  # the assistant's message left open, no <|im_end|> after it
    r = _chat(
        server, messages=partial, max_tokens=2, temperature=0,
        add_generation_prompt=False, continue_final_message=True,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(continued)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"continue_final_message": True}, "continue_final_message"),  # with the generation prompt
        ({"continue_final_message": True, "add_generation_prompt": False}, "continue_final_message"),
        ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
        ({"chat_template_kwargs": {"x": _nested(MAX_JSON_DEPTH + 1)}}, "chat_template_kwargs"),
        ({"stop_token_ids": [10**6]}, "stop_token_ids"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"stop_token_ids": "4"}, "stop_token_ids"),
        ({"allowed_token_ids": [10**6]}, "allowed_token_ids"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"bad_words": [" "]}, "bad_words"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"),
        ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ],
)
def test_bad_extras_are_400_naming_the_field(server, body, param):
    r = _chat(server, messages=USER, max_tokens=1, **body)  # the last message is the user's
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"].split(".")[0] == param, error


def test_stop_token_ids_end_the_output_without_their_text(server):
    forced = {str(CAT): 100}  # every token is `cat`
    out = _completion(server, max_tokens=5, logit_bias=forced, stop_token_ids=[CAT])
    choice = out["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("", "stop")
    assert out["usage"]["completion_tokens"] == 1
    kept = _completion(
        server, max_tokens=5, logit_bias=forced, stop_token_ids=[CAT], include_stop_str_in_output=True
    )["choices"][0]
    assert (kept["text"].strip(), kept["finish_reason"]) == ("cat", "stop")
    assert _completion(server, max_tokens=3, logit_bias=forced)["choices"][0]["finish_reason"] == "length"


def test_include_stop_str_in_output_keeps_the_stop_string(server):
    forced = {str(CAT): 100}
    cut = _completion(server, max_tokens=5, logit_bias=forced, stop="cat")["choices"][0]
    kept = _completion(server, max_tokens=5, logit_bias=forced, stop="cat", include_stop_str_in_output=True)
    assert cut["text"].strip() == "" and kept["choices"][0]["text"].strip() == "cat"


def test_skip_special_tokens(server):
    forced = {str(IM_START): 100}  # a special token, not an eos
    skipped = _completion(server, max_tokens=2, logit_bias=forced)["choices"][0]["text"]
    shown = _completion(server, max_tokens=2, logit_bias=forced, skip_special_tokens=False)
    assert "<|im_start|>" not in skipped and shown["choices"][0]["text"].count("<|im_start|>") == 2
    # the eos that ends a request is not text (vLLM), special tokens shown or not
    eos = _completion(server, max_tokens=3, logit_bias={str(IM_END): 100}, skip_special_tokens=False)
    assert (eos["choices"][0]["text"], eos["choices"][0]["finish_reason"]) == ("", "stop")


def test_stream_options_need_a_stream_and_continuous_usage_counts_every_chunk(server):
    r = _chat(server, messages=USER, max_tokens=2, stream_options={"include_usage": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options"
    r = _chat(server, messages=USER, max_tokens=2, stream=True, stream_options={"usage": True})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("stream_options")
    body = {"model": server.model, "prompt": "the cat", "max_tokens": 4, "ignore_eos": True, "stream": True,
            "stream_options": {"continuous_usage_stats": True}}  # fmt: skip
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 4 and all("usage" in c for c in chunks)
    assert {c["usage"]["prompt_tokens"] for c in chunks} == {chunks[0]["usage"]["prompt_tokens"]}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": True}, "max_tokens"),  # not coerced to 1
        ({"stream": "yes"}, "stream"),
        ({"n": "2"}, "n"),
        ({"stop": 5}, "stop"),  # the field, not pydantic's union member (`stop.str`)
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ],
)
def test_wrong_types_are_400s_naming_the_field(server, body, param):
    r = _chat(server, **{"messages": USER, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def _sampled_ids(server, **body) -> list[int]:
    """The output's token ids, through their logprobs' token texts (one word a token here)."""
    tokens = _completion(server, logprobs=0, **body)["choices"][0]["logprobs"]["tokens"]
    return [_tokens(server, prompt=t, add_special_tokens=False)[0] for t in tokens]


def test_allowed_token_ids_and_bad_words_shape_the_output(server):
    allowed = [CAT, HELLO]
    ids = _sampled_ids(
        server, max_tokens=8, ignore_eos=True, temperature=1.0, seed=3, allowed_token_ids=allowed
    )
    assert len(ids) == 8 and set(ids) <= set(allowed)
    words = {HELLO: "hello", 9: "world", 10: "the", CAT: "cat", 13: "sat", 14: "on", 15: "mat"}
    greedy = _sampled_ids(server, max_tokens=4, ignore_eos=True, allowed_token_ids=list(words))
    banned = _sampled_ids(
        server, max_tokens=4, ignore_eos=True, allowed_token_ids=list(words), bad_words=[words[greedy[0]]]
    )
    assert len(banned) == 4 and set(banned) <= set(words) and greedy[0] not in banned


def test_truncate_prompt_tokens_keeps_the_prompt_tail(server):
    full = _tokens(server, prompt="the cat sat on the mat")
    cut = _completion(server, prompt="the cat sat on the mat", max_tokens=3, truncate_prompt_tokens=3)
    assert cut["usage"]["prompt_tokens"] == 3
    assert (
        cut["choices"][0]["text"] == _completion(server, prompt=full[-3:], max_tokens=3)["choices"][0]["text"]
    )
    echoed = _completion(
        server, prompt="the cat sat on the mat", max_tokens=1, truncate_prompt_tokens=2, echo=True
    )
    assert echoed["choices"][0]["text"].startswith("the mat")  # the prompt the model read
    r = _chat(server, messages=USER, max_tokens=1, truncate_prompt_tokens=2)
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 2


def test_prompt_logprobs_score_every_prompt_token_but_the_first(server):
    prompt = "the cat sat on the mat"
    ids = _tokens(server, prompt=prompt)
    out = _completion(server, prompt=prompt, max_tokens=1, prompt_logprobs=2)
    lists = out["choices"][0]["prompt_logprobs"]
    echo = _completion(server, prompt=prompt, max_tokens=0, echo=True, logprobs=1)["choices"][0]["logprobs"]
    assert len(lists) == len(ids) == len(echo["token_logprobs"]) and lists[0] is None
    for token, entry, echoed in zip(ids[1:], lists[1:], echo["token_logprobs"][1:], strict=True):
        assert str(token) in entry and len(entry) in (2, 3)
        assert entry[str(token)]["logprob"] == pytest.approx(echoed, abs=1e-5)
        ranks = sorted(e["rank"] for e in entry.values())
        assert ranks[:2] == [1, 2] and all(
            e["logprob"] <= 0 and isinstance(e["decoded_token"], str) for e in entry.values()
        )
    assert all(lp is None or len(lp) <= 3 for lp in lists)
    r = _chat(server, messages=USER, max_tokens=1, prompt_logprobs=0)
    assert r.status_code == 200, r.text
    chat = r.json()["prompt_logprobs"]
    assert len(chat) == r.json()["usage"]["prompt_tokens"] and all(len(e) == 1 for e in chat[1:])


def test_disable_access_log_for_endpoints(server):
    """vLLM's flag: the server started with /health (polled by start_server) left out of its log."""
    assert httpx.get(server.url + "/health?probe=1", timeout=10).status_code == 200
    _tokens(server, prompt="the cat")
    log = server.log.read_text()
    assert '"POST /tokenize HTTP/1.1" 200' in log and "GET /health" not in log


def test_chat_echo_puts_the_continued_message_first(server):
    partial = [*USER, {"role": "assistant", "content": "the cat"}]
    body = {"messages": partial, "max_tokens": 2, "ignore_eos": True, "add_generation_prompt": False, "temperature": 0,
            "continue_final_message": True}  # fmt: skip
    plain = _chat(server, **body).json()["choices"][0]["message"]["content"]
    echoed = _chat(server, echo=True, **body).json()["choices"][0]["message"]["content"]
    assert echoed == "the cat" + plain
    stream = {"model": server.model, "stream": True, "echo": True, **body}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=stream, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == echoed
    # the last message is the user's: nothing to echo
    greedy = {"messages": USER, "max_tokens": 2, "temperature": 0}
    answers = [
        _chat(server, **greedy, **extra).json()["choices"][0]["message"]["content"]
        for extra in ({}, {"echo": True})
    ]
    assert answers[0] == answers[1]
