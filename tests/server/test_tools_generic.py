"""The generic tool-call format and bounded forced calls, without a model: the template prelude,
the grammar's schema, parsing whole and cut answers, and streaming."""

from __future__ import annotations

import json

import jsonschema
import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from kvspill.server.generic_tools import GenericStream, parse_generic
from kvspill.server.tool_parsers import array_items
from kvspill.server.tools import NamedToolChoice, Tool, ToolDeltaStream, answer_message, plan_tools
from kvspill.text.chat_templates import (
    EMBEDDED_TEMPLATE,
    choose_chat_template,
    is_generic,
    shipped_template,
    with_generic_tools,
)

# SmolLM2-135M-Instruct's own template (GGUF metadata): it knows nothing of tools
SMOL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
TIME = {"type": "function", "function": {"name": "get_time"}}
TOOLS = [Tool.model_validate(WEATHER), Tool.model_validate(TIME)]
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ],
]


def _render(template: str, messages: list[dict], tools: list[dict] | None = None) -> str:
    return render_jinja_template([messages], tools=tools, chat_template=template, add_generation_prompt=True)[
        0
    ][0]


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_wrapped_and_shipped_templates_render_as_the_model_s_own_without_tools(messages):
    own = _render(SMOL, messages)
    assert _render(with_generic_tools(SMOL), messages) == own
    assert _render(shipped_template(EMBEDDED_TEMPLATE), messages) == own


def test_the_prelude_puts_tools_and_history_into_the_documented_shapes():
    generic = with_generic_tools(SMOL)
    assert is_generic(generic) and with_generic_tools(generic) == generic
    plan = plan_tools(TOOLS, None, None, generic)
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]  # fmt: skip
    text = _render(generic, history, plan.template_tools)
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call these tools")
    assert text.count("<|im_start|>system") == 1
    assert '{"name": "get_weather", "description": "Weather of a city", "parameters": {' in text
    assert '{"name": "get_time", "parameters": {"type": "object"}}' in text
    assert (
        '<|im_start|>assistant\n{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
        in text
    )
    assert '<|im_start|>user\n{"tool_response": "sunny"}<|im_end|>' in text


def test_choice_of_template():
    assert choose_chat_template(None, None, embedded=False) is None
    assert choose_chat_template("{{ tools }}", None, embedded=False) == "{{ tools }}"
    assert is_generic(choose_chat_template(SMOL, None, embedded=True))
    assert choose_chat_template(SMOL, "{{ tools }}x", embedded=True) == "{{ tools }}x"


def _schema(plan) -> dict:
    return json.loads(plan.guided.value)


def test_generic_grammar_per_tool_choice():
    generic = with_generic_tools(SMOL)
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    auto = plan_tools(TOOLS, "auto", None, generic)
    assert auto.fmt == "generic" and auto.mode == "auto"
    jsonschema.validate({"response": "hi"}, _schema(auto))
    jsonschema.validate({"tool_calls": [call, {"name": "get_time", "arguments": {}}]}, _schema(auto))
    with pytest.raises(jsonschema.ValidationError):  # one call per tool at most
        jsonschema.validate({"tool_calls": [call, call, call]}, _schema(auto))
    required = plan_tools(TOOLS, "required", False, generic)
    jsonschema.validate({"tool_calls": [call]}, _schema(required))
    for bad in ({"response": "hi"}, {"tool_calls": [call, call]}, {"tool_calls": []}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, _schema(required))
    named = plan_tools(TOOLS, NamedToolChoice.model_validate({"type": "function", "function": {"name": "get_time"}}), None, generic)  # fmt: skip
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool_calls": [call]}, _schema(named))
    # the model writes `name` before `arguments`: the grammar keeps the schema's order
    assert auto.guided.value.index('"name"') < auto.guided.value.index('"arguments"')


def test_generic_answers_whole_and_cut():
    full = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]}'
    plan = plan_tools(TOOLS, "required", None, with_generic_tools(SMOL))
    content, calls = answer_message(plan, full)
    assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]
    content, calls = answer_message(plan, full[:-25])  # max_tokens inside the second call
    assert content is None and [c.name for c in calls] == ["get_weather"]
    assert answer_message(plan, full[:30]) == (None, [])
    for cut in range(1, 16):  # max_tokens before the wrapper's key is whole: no JSON as content
        assert answer_message(plan, full[:cut]) == (None, []), full[:cut]
    for cut in range(1, 15):  # '{"response": "' is 14 characters: the text starts after them
        assert parse_generic('{"response": "hi"}'[:cut]).content in (None, "")
    assert parse_generic('{"response": "a \\"b\\" \\u00e9"}').content == 'a "b" é'
    assert parse_generic('{"response": "cut \\u00').content == "cut "
    assert parse_generic('{"response": "pair \\ud83d\\ude00').content == "pair \U0001f600"
    assert parse_generic('{"response": "half \\ud83d').content == "half "


def test_generic_stream_adds_up_to_the_whole_answer():
    for answer in (
        '{"response": "Hello \\"you\\" \\u00e9!"}',
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]}',
    ):
        stream, content, calls = GenericStream(), "", []
        for i in range(len(answer)):
            piece, new = stream.feed(answer[i], i == len(answer) - 1)
            content += piece
            calls += new
        whole = parse_generic(answer)
        assert content == (whole.content or "")
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
            (c.name, c.arguments) for c in whole.calls
        ]
        assert [c["index"] for c in calls] == list(range(len(calls)))


def test_array_items_of_cut_arrays():
    assert array_items('[{"a": 1}, {"b": 2}]') == ([{"a": 1}, {"b": 2}], True)
    assert array_items('[{"a": 1}, {"b": ') == ([{"a": 1}], False)
    assert array_items('[{"a": 1}, {"b": 2}') == ([{"a": 1}, {"b": 2}], False)
    assert array_items("[1, 12") == ([1], False)  # 12 may still grow
    assert array_items('{"a": 1}') is None


def test_template_required_is_bounded_and_keeps_finished_calls_when_cut():
    template = "{% if tools %}{{ tools | tojson }}{% endif %}"
    plan = plan_tools(TOOLS, "required", None, template)
    assert plan.fmt == "" and _schema(plan)["maxItems"] == 2
    answer = '[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"ci'
    content, calls = answer_message(plan, answer)
    assert content is None and [c.name for c in calls] == ["get_time"]
    stream = ToolDeltaStream(plan)
    first = stream.feed(answer[:40], False)[1]
    assert [c["function"]["name"] for c in first] == ["get_time"]
    assert stream.feed(answer[40:], True) == ("", [])
