"""vLLM's request extras that clients of vLLM send: `chat_template_kwargs` (Qwen3's
`enable_thinking`), `add_generation_prompt`, `continue_final_message`, `stop_token_ids`,
`include_stop_str_in_output`, `skip_special_tokens`; over one real server process (tiny Llama on
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
    s = start_server(tiny_llama_dir, "--chat-template", str(template), log=folder / "server.log")
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
