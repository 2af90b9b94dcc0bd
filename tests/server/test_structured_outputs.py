"""Structured outputs and tool calls through a real server: the openai client and LangChain.

The server runs a tiny random Llama with SmolLM2's tokenizer and a Hermes-style tool template
(--chat-template): the weights are noise, so every structure here comes from guided decoding,
and schemas bound their strings so answers end well inside max_tokens."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

import httpx
import jsonschema
import openai
import pytest

from .conftest import start_server, stop_server

pytestmark = pytest.mark.slow

TEMPLATE = Path(__file__).with_name("tools_template.jinja")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 6},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23}}, "required": ["hour"]},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_smol_vocab_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("srv") / "server.log"
    s = start_server(tiny_smol_vocab_dir, "--chat-template", str(TEMPLATE), log=log)
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _ask(client, server, **kwargs):
    kwargs.setdefault("messages", [{"role": "user", "content": "Weather in Paris?"}])
    kwargs.setdefault("max_tokens", 48)
    return client.chat.completions.create(model=server.model, **kwargs)


def test_response_format_json_schema_with_n(client, server):
    schema = WEATHER["function"]["parameters"]
    out = _ask(client, server, n=3, temperature=1.0, seed=5,
               response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})  # fmt: skip
    for choice in out.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_named_tool_call_round_trip(client, server):
    out = _ask(
        client,
        server,
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    back = _ask(client, server, messages=messages, tools=[WEATHER], max_tokens=4)
    assert back.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_required_tool_choice_streams_tool_call_deltas(client, server):
    # room for the most calls allowed (one per tool, about 30 tokens each): the array closes itself
    stream = _ask(
        client, server, tools=[WEATHER, TIME], tool_choice="required", stream=True, temperature=1.0, seed=1,
        max_tokens=96,
    )  # fmt: skip
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            entry["name"] += tc.function.name or ""
            entry["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and calls
    tools = {"get_weather": WEATHER, "get_time": TIME}
    for entry in calls.values():
        jsonschema.validate(json.loads(entry["arguments"]), tools[entry["name"]]["function"]["parameters"])


def test_named_tool_call_streams_its_arguments(client, server):
    stream = _ask(
        client,
        server,
        tools=[TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        stream=True,
    )
    pieces = [tc for chunk in stream for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices]
    assert pieces[0].id and pieces[0].function.name == "get_time"
    jsonschema.validate(
        json.loads("".join(p.function.arguments or "" for p in pieces)), TIME["function"]["parameters"]
    )


def test_guided_extras_logit_bias_and_refusals(client, server):
    out = _ask(client, server, extra_body={"guided_choice": ["red", "green"]})
    assert out.choices[0].message.content in ("red", "green")
    out = _ask(client, server, extra_body={"guided_regex": r"[0-9]{4}"})
    assert len(out.choices[0].message.content) == 4 and out.choices[0].message.content.isdigit()
    forced = _ask(client, server, logit_bias={"4242": 100}, max_tokens=3, temperature=1.0)
    assert forced.usage.completion_tokens == 3
    url = server.url + "/v1/chat/completions"
    base = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for extra, param in [
        ({"functions": []}, "functions"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 500}}, "logit_bias"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}}, "response_format"),
        ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
    ]:  # fmt: skip
        r = httpx.post(url, json={**base, **extra}, timeout=60)
        assert r.status_code == 400, (extra, r.text)
        assert r.json()["error"]["param"] == param, r.text


def test_model_route(server):
    card = httpx.get(f"{server.url}/v1/models/{server.model}").json()
    assert card["id"] == server.model and card["object"] == "model"
    assert httpx.get(f"{server.url}/v1/models/other").status_code == 404


def test_langchain_bind_tools_and_with_structured_output(server):
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    llm = ChatOpenAI(
        model=server.model, base_url=server.url + "/v1", api_key="unused", max_tokens=48, max_retries=0
    )

    def get_time(hour: int) -> str:
        """Time at an hour."""
        return str(hour)

    msg = llm.bind_tools([get_time], tool_choice="get_time").invoke("What time?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_time"
    assert isinstance(msg.tool_calls[0]["args"]["hour"], int)

    class Pet(BaseModel):
        kind: Literal["cat", "dog"]
        name: str = Field(max_length=6)

    pet = llm.with_structured_output(Pet).invoke("A pet?")
    assert isinstance(pet, Pet)


def test_vllm_structured_outputs_constrain_the_answer(client, server):
    """vLLM's `structured_outputs` (its guided_* fields since 0.10): json, regex and choice hold;
    two constraints in it, or beside another field, are a 400 naming it."""
    schema = WEATHER["function"]["parameters"]
    out = _ask(client, server, temperature=1.0, seed=3, extra_body={"structured_outputs": {"json": schema}})
    jsonschema.validate(json.loads(out.choices[0].message.content), schema)
    regex = _ask(
        client, server, temperature=1.0, extra_body={"structured_outputs": {"regex": r"[a-c]{3}-\d"}}
    )
    assert re.fullmatch(r"[a-c]{3}-\d", regex.choices[0].message.content)
    choice = _ask(
        client, server, temperature=1.0, extra_body={"structured_outputs": {"choice": ["yes", "no"]}}
    )
    assert choice.choices[0].message.content in ("yes", "no")
    for body in (
        {"structured_outputs": {"regex": "a", "choice": ["b"]}},
        {"structured_outputs": {"regex": "a"}, "guided_choice": ["b"]},
        {"structured_outputs": {"yaml": "a"}},
    ):
        with pytest.raises(openai.BadRequestError) as bad:
            _ask(client, server, extra_body=body)
        assert bad.value.body["param"].split(".")[0] in ("structured_outputs", "guided_choice"), body


def test_fields_that_change_nothing_are_accepted_and_others_named(client, server):
    """OpenAI's and vLLM's fields at values that change nothing here (and any field at null) are
    accepted; another value of them, or a field the server lacks, is a 400 naming it."""
    fine = {
        "store": False, "service_tier": "auto", "metadata": {"team": "a"}, "prompt_cache_key": "k",
        "safety_identifier": "u1", "modalities": ["text"], "prediction": None, "audio": None,
        "use_beam_search": False, "priority": 0, "web_search_options": None,
    }  # fmt: skip
    assert _ask(client, server, max_tokens=2, extra_body=fine).choices[0].finish_reason
    for field, value in (
        ("store", True),
        ("service_tier", "flex"),
        ("priority", 5),
        ("guided_whitespace_pattern", " "),
    ):
        with pytest.raises(openai.BadRequestError) as bad:
            _ask(client, server, max_tokens=2, extra_body={field: value})
        assert bad.value.body["param"] == field and field in bad.value.body["message"]
