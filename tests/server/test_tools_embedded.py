"""Tools on the embedded SmolLM2-135M-Instruct through a real server (CPU, greedy): the generic
format its own template gets (no --chat-template), driven by the openai client and LangChain.

The prompts are ones the 135M model answers as the assertions say under greedy decoding; what the
grammar guarantees (shapes, bounds, schemas) is asserted for every answer."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from .conftest import start_server, stop_server

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}  # fmt: skip
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the current time in a time zone", "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 20}}, "required": ["timezone"]}}}  # fmt: skip
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
BOTH = "Use both tools: weather in Oslo and time in Asia/Tokyo."  # greedy: two calls, 53 tokens


@pytest.fixture(scope="module")
def server(smollm2_gguf_path, tmp_path_factory):
    s = start_server(smollm2_gguf_path, log=tmp_path_factory.mktemp("srv") / "server.log")
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _ask(client, server, question: str, **kwargs):
    kwargs.setdefault("tools", [WEATHER, TIME])
    kwargs.setdefault("max_tokens", 80)
    messages = [{"role": "user", "content": question}]
    return client.chat.completions.create(model=server.model, messages=messages, temperature=0, **kwargs)


def _calls(choice) -> list[tuple[str, dict]]:
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    return calls


def test_auto_answers_a_call_or_text(client, server):
    call = _ask(client, server, "What is the weather in Paris?").choices[0]
    assert call.finish_reason == "tool_calls" and call.message.content is None
    assert _calls(call) == [("get_weather", {"city": "Paris"})]
    text = _ask(client, server, "What time is it in Tokyo?").choices[0]
    assert text.finish_reason == "stop" and not text.message.tool_calls
    assert "Tokyo" in text.message.content and not text.message.content.startswith("{")


def test_response_format_beside_generic_tools_is_a_400_saying_why(client, server):
    with pytest.raises(openai.BadRequestError) as bad:
        _ask(client, server, "Hi", response_format={"type": "json_object"})
    assert bad.value.body["param"] == "response_format"
    assert "cannot be combined with tools on this model" in bad.value.body["message"]


def test_required_parallel_is_bounded_and_a_cut_keeps_the_finished_calls(client, server):
    both = _ask(client, server, BOTH, tool_choice="required").choices[0]
    assert both.finish_reason == "tool_calls"
    assert _calls(both) == [("get_weather", {"city": "Oslo"}), ("get_time", {"timezone": "Asia/Tokyo"})]
    one = _ask(client, server, BOTH, tool_choice="required", parallel_tool_calls=False).choices[0]
    assert one.finish_reason == "tool_calls" and _calls(one) == _calls(both)[:1]
    cut = _ask(client, server, BOTH, tool_choice="required", max_tokens=40).choices[0]
    assert cut.finish_reason == "length" and cut.message.content is None
    assert _calls(cut) == _calls(both)[:1]


def test_named_choice(client, server):
    named = {"type": "function", "function": {"name": "get_time"}}
    out = _ask(client, server, "What time is it in Tokyo?", tool_choice=named).choices[0]
    assert out.finish_reason == "tool_calls" and [name for name, _ in _calls(out)] == ["get_time"]


def _streamed(client, server, question: str, **kwargs) -> tuple[str, list[tuple[str, dict]], str | None]:
    content, calls, finish = "", {}, None
    for chunk in _ask(client, server, question, stream=True, **kwargs):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            calls[tc.index] = (tc.function.name, json.loads(tc.function.arguments))
        finish = chunk.choices[0].finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def test_streaming_sends_the_same_calls_and_text(client, server):
    assert _streamed(client, server, BOTH, tool_choice="required") == (
        "",
        [("get_weather", {"city": "Oslo"}), ("get_time", {"timezone": "Asia/Tokyo"})],
        "tool_calls",
    )
    whole = _ask(client, server, "What time is it in Tokyo?").choices[0].message.content
    assert _streamed(client, server, "What time is it in Tokyo?") == (whole, [], "stop")


def test_langchain_bind_tools_with_and_without_tool_choice_any(server):
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=server.model,
        base_url=server.url + "/v1",
        api_key="unused",
        max_tokens=60,
        temperature=0,
        max_retries=0,
    )

    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return city

    def get_time(timezone: str) -> str:
        """Get the current time in a time zone."""
        return timezone

    auto = llm.bind_tools([get_weather, get_time]).invoke("What is the weather in Paris?")
    assert [(c["name"], c["args"]) for c in auto.tool_calls] == [("get_weather", {"city": "Paris"})]
    forced = llm.bind_tools([get_weather, get_time], tool_choice="any").invoke("What time is it in Tokyo?")
    assert forced.tool_calls and forced.tool_calls[0]["name"] in ("get_weather", "get_time")
    assert not forced.content
