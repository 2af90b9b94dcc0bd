"""OpenAI tool calling over the model's own chat template.

`tools` go to the template (transformers' `apply_chat_template(tools=...)`); the answer is parsed
back into `tool_calls` in the format that template teaches (`tool_parsers.py`). `tool_choice`:
- `auto` (the default with tools): the model decides; its text is parsed;
- `none`: the tools are not shown and nothing is parsed;
- `required`: guided decoding forces a JSON list of one or more `{"name", "arguments"}` objects,
  each matching one tool's parameter schema;
- a named function: guided decoding forces that tool's arguments object; they stream as they come.

Invariants:
- A template that never mentions `tools` cannot show them to the model: a 400 saying so
  (tool_choice `none` excepted).
- `finish_reason` is `tool_calls` when the answer holds calls and the model stopped by itself.
- Every tool's `parameters` is bounded in depth (`guided/bounded_json.py`) before the template or
  a schema walk sees it: too deep is a 400 naming `tools`, never a RecursionError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import check_json_depth
from kvspill.guided.spec import GuidedSpec
from kvspill.server.tool_parsers import ToolCall, ToolCallStream, format_for_template, parse_tool_calls

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


@dataclass(frozen=True)
class ToolPlan:
    """How one chat request uses its tools."""

    mode: Literal["auto", "required", "named"]
    fmt: str  # the template's tool-call format (auto)
    template_tools: list[dict[str, Any]]
    guided: GuidedSpec | None
    named: str | None = None
    parallel: bool = True


def _schema(tool: Tool) -> dict[str, Any]:
    return tool.function.parameters or _ANY_OBJECT


def plan_tools(
    tools: list[Tool] | None, choice: ToolChoice | None, parallel: bool | None, template: str | None
) -> ToolPlan | None:
    """The plan of a request's tools, or None when it has none (or tool_choice is none)."""
    if not tools:
        if choice not in (None, "none"):
            raise InvalidParameterError("tool_choice", "tool_choice needs `tools`")
        return None
    if choice == "none":
        return None
    for t in tools:
        check_json_depth(t.function.parameters, "tools", f"parameters of tool {t.function.name!r}")
    if template is None or "tools" not in template:
        raise InvalidParameterError(
            "tools",
            "this model's chat template has no tool support, so it cannot be given tools: "
            "use a model whose template takes `tools`, serve it with --chat-template, or send tool_choice none",
        )
    rendered = [t.model_dump(exclude_none=True) for t in tools]
    by_name = {t.function.name: t for t in tools}
    if isinstance(choice, NamedToolChoice):
        tool = by_name.get(choice.function.name)
        if tool is None:
            raise InvalidParameterError(
                "tool_choice", f"tool_choice names {choice.function.name!r}, not one of `tools`"
            )
        spec = GuidedSpec.json_schema(_schema(tool), "tools")
        return ToolPlan("named", "", rendered, spec, named=tool.function.name)
    if choice == "required":
        one_call = [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": _schema(tool)},
                "required": ["name", "arguments"],
            }
            for name, tool in by_name.items()
        ]
        array: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": one_call}}
        if parallel is False:
            array["maxItems"] = 1
        return ToolPlan(
            "required", "", rendered, GuidedSpec.json_schema(array, "tools"), parallel=parallel is not False
        )
    return ToolPlan("auto", format_for_template(template), rendered, None, parallel=parallel is not False)


def _forced_calls(plan: ToolPlan, text: str) -> list[ToolCall] | None:
    """The calls of a `required` or named answer, or None when it was cut short."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if plan.mode == "named":
        assert plan.named is not None
        return (
            [ToolCall(plan.named, json.dumps(value, ensure_ascii=False))] if isinstance(value, dict) else None
        )
    if not isinstance(value, list):
        return None
    return [ToolCall(v["name"], json.dumps(v["arguments"], ensure_ascii=False)) for v in value]


def answer_message(plan: ToolPlan, text: str) -> tuple[str | None, list[ToolCall]]:
    """(content, tool calls) of a finished answer."""
    if plan.mode == "auto":
        parsed = parse_tool_calls(text, plan.fmt)
        calls = parsed.calls if plan.parallel else parsed.calls[:1]
        return parsed.content, calls
    forced = _forced_calls(plan, text)
    return (text, []) if forced is None else (None, forced)


def finish_reason(reason: str | None, has_calls: bool) -> str | None:
    return "tool_calls" if has_calls and reason == "stop" else reason


class ToolDeltaStream:
    """One streamed choice: its text deltas as (content delta, tool_calls deltas)."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.auto = ToolCallStream(plan.fmt) if plan.mode == "auto" else None
        self.text = ""
        self.named_id: str | None = None
        self.num_calls = 0

    def feed(self, delta: str, finished: bool) -> tuple[str, list[dict[str, Any]]]:
        if self.auto is not None:
            content, calls = self.auto.feed(delta, finished)
            if not self.plan.parallel:
                calls = [c for c in calls if c["index"] == 0]
        elif self.plan.mode == "named":
            content, calls = "", self._named(delta)
        else:
            content, calls = self._required(delta, finished)
        self.num_calls += sum(1 for c in calls if "id" in c)
        return content, calls

    def _named(self, delta: str) -> list[dict[str, Any]]:
        """The arguments stream as the model writes them (guided decoding keeps them valid)."""
        if self.named_id is None:
            self.named_id = ToolCall(self.plan.named or "", "").id
            head = {"index": 0, "id": self.named_id, "type": "function"}
            return [{**head, "function": {"name": self.plan.named, "arguments": delta}}]
        return [{"index": 0, "function": {"arguments": delta}}] if delta else []

    def _required(self, delta: str, finished: bool) -> tuple[str, list[dict[str, Any]]]:
        self.text += delta
        if not finished:
            return "", []
        calls = _forced_calls(self.plan, self.text)
        if calls is None:
            return self.text, []
        return "", [{"index": i, **c.as_openai()} for i, c in enumerate(calls)]
