"""How a chat request's tools and tool_choice become a template argument, a grammar and a parser."""

from __future__ import annotations

import json

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.server.tools import NamedToolChoice, Tool, ToolDeltaStream, answer_message, plan_tools

TEMPLATE = "{% if tools %}{{ tools | tojson }}<tool_call>{% endif %}"
TOOLS = [
    Tool.model_validate({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}),
    Tool.model_validate({"type": "function", "function": {"name": "g"}}),
]  # fmt: skip


def test_template_without_tools_is_refused_unless_tool_choice_none():
    with pytest.raises(InvalidParameterError, match="no tool support"):
        plan_tools(TOOLS, "auto", None, "{{ messages }}")
    assert plan_tools(TOOLS, "none", None, "{{ messages }}") is None
    with pytest.raises(InvalidParameterError, match="needs `tools`"):
        plan_tools(None, "required", None, TEMPLATE)


def test_auto_parses_the_template_format():
    plan = plan_tools(TOOLS, None, None, TEMPLATE)
    assert plan is not None and plan.mode == "auto" and plan.fmt == "hermes" and plan.guided is None
    content, calls = answer_message(plan, 'hi<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    assert content == "hi" and calls[0].name == "f"


def test_a_tool_call_parser_overrides_the_template_format():
    plan = plan_tools(TOOLS, None, None, TEMPLATE, "llama3_json")
    assert plan is not None and plan.fmt == "llama3_json"
    _, calls = answer_message(plan, '{"name": "f", "parameters": {"a": 1}}')
    assert calls[0].name == "f" and json.loads(calls[0].arguments) == {"a": 1}


def test_required_schema_lists_every_tool_and_parallel_false_allows_one():
    plan = plan_tools(TOOLS, "required", False, TEMPLATE)
    assert plan is not None and plan.guided is not None
    schema = json.loads(plan.guided.value)
    assert schema["maxItems"] == 1 and len(schema["items"]["anyOf"]) == 2
    _, calls = answer_message(plan, '[{"name": "g", "arguments": {}}]')
    assert [c.name for c in calls] == ["g"]


def test_named_choice_forces_the_arguments_and_streams_them():
    choice = NamedToolChoice.model_validate({"type": "function", "function": {"name": "f"}})
    plan = plan_tools(TOOLS, choice, None, TEMPLATE)
    assert plan is not None and json.loads(plan.guided.value)["properties"] == {"a": {"type": "integer"}}
    stream = ToolDeltaStream(plan)
    first = stream.feed('{"a"', False)[1]
    rest = stream.feed(": 3}", True)[1]
    assert first[0]["function"]["name"] == "f" and first[0]["id"]
    assert first[0]["function"]["arguments"] + rest[0]["function"]["arguments"] == '{"a": 3}'
    with pytest.raises(InvalidParameterError, match="not one of"):
        plan_tools(
            TOOLS,
            NamedToolChoice.model_validate({"type": "function", "function": {"name": "h"}}),
            None,
            TEMPLATE,
        )
