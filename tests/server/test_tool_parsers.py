"""Tool-call parsing per format, whole and streamed in small pieces (partial JSON held back)."""

from __future__ import annotations

import json

import pytest

from kvspill.server.tool_parsers import ToolCallStream, format_for_template, parse_tool_calls

CASES = {
    "hermes": (
        'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
        '<tool_call>{"name": "get_time", "arguments": {"tz": "CET"}}</tool_call>',
        "Let me check.",
    ),
    "mistral": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_time", "arguments": {"tz": "CET"}}]',
        None,
    ),  # fmt: skip
    "llama3_json": (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}; '
        '{"name": "get_time", "parameters": {"tz": "CET"}}',
        None,
    ),
}
EXPECTED = [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {"tz": "CET"})]


@pytest.mark.parametrize("fmt", list(CASES))
def test_whole_answer(fmt):
    text, content = CASES[fmt]
    parsed = parse_tool_calls(text, fmt)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == EXPECTED


def test_mistral_v11_and_without_marker():
    v11 = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}'
    assert [(c.name, json.loads(c.arguments)) for c in parse_tool_calls(v11, "mistral").calls] == EXPECTED
    bare = CASES["mistral"][0].removeprefix("[TOOL_CALLS]")  # the marker is a special token, often dropped
    assert len(parse_tool_calls(bare, "mistral").calls) == 2


@pytest.mark.parametrize("fmt", list(CASES))
def test_text_that_is_not_a_call_stays_content(fmt):
    for text in (
        "Just an answer.",
        '<tool_call>{"name": "f", "arguments": {"a": </tool_call>',
        '{"no": "name"}',
    ):
        parsed = parse_tool_calls(text, fmt)
        assert parsed.calls == [] and parsed.content == text


@pytest.mark.parametrize("fmt", list(CASES))
@pytest.mark.parametrize("piece", [1, 3, 7])
def test_streamed_in_pieces_equals_whole(fmt, piece):
    text, content = CASES[fmt]
    stream = ToolCallStream(fmt)
    got_content, calls = "", []
    pieces = [text[i : i + piece] for i in range(0, len(text), piece)]
    for k, delta in enumerate(pieces):
        c, deltas = stream.feed(delta, finished=k == len(pieces) - 1)
        got_content += c
        for d in deltas:
            json.loads(d["function"]["arguments"])  # never a partial JSON
            calls.append(d)
    assert (got_content.strip() or None) == content
    assert [d["index"] for d in calls] == [0, 1]
    assert [(d["function"]["name"], json.loads(d["function"]["arguments"])) for d in calls] == EXPECTED
    assert len({d["id"] for d in calls}) == 2


def test_streamed_hermes_emits_first_call_before_the_answer_ends():
    stream = ToolCallStream("hermes")
    text = CASES["hermes"][0]
    first_end = text.index("</tool_call>") + len("</tool_call>")
    content, calls = stream.feed(text[:first_end], finished=False)
    assert content == "Let me check." and [c["function"]["name"] for c in calls] == ["get_weather"]
    _, more = stream.feed(text[first_end:], finished=True)
    assert [c["index"] for c in more] == [1]


def test_streamed_plain_content_holds_back_only_a_possible_marker():
    stream = ToolCallStream("hermes")
    assert stream.feed("Hello <tool", finished=False)[0] == "Hello "
    assert stream.feed("kit", finished=False)[0] == "<toolkit"
    assert stream.feed("", finished=True) == ("", [])


def test_format_for_template():
    assert format_for_template("{% if tools %}<tool_call>{% endif %}") == "hermes"
    assert format_for_template("[AVAILABLE_TOOLS] {{ tools }} [TOOL_CALLS]") == "mistral"
    assert format_for_template('<|python_tag|> "parameters" {{ tools }}') == "llama3_json"
    assert format_for_template("{{ tools }}") == "hermes"
