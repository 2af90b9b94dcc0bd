"""OpenAI tool calling: over the model's own chat template, or the generic format when it has none.

`tools` go to the template (transformers' `apply_chat_template(tools=...)`). A template that takes
tools teaches its own call syntax, parsed back into `tool_calls` (`tool_parsers.py`); one served
with the generic prelude (`text/chat_templates.py`: every template without tool support gets it)
makes the model answer JSON that guided decoding enforces (`generic_tools.py`). `tool_choice`:
- `auto` (the default with tools): the model decides; its text is parsed (the generic format: a
  grammar with both branches, a call or a text answer);
- `none`: the tools are not shown and nothing is parsed;
- `required`: guided decoding forces one or more calls, each matching one tool's parameter schema;
- a named function: guided decoding forces that tool's arguments object (the generic format: one
  call of that tool); a template's named call streams its arguments as they come.

Invariants:
- Forced calls form a bounded array: at most `max_calls` items (one with parallel_tool_calls false
  or a named choice, else one per tool), so a model that repeats a call stops after the last one
  instead of running to max_tokens.
- An answer cut short keeps the calls it finished as `tool_calls`; forced JSON is never content.
- A template that never mentions `tools` cannot show them to the model: a 400 saying so
  (tool_choice `none` excepted). The server wraps every such template (engine start-up), so this
  is a template handed to `plan_tools` unwrapped.
- `finish_reason` is `tool_calls` when the answer holds calls and the model stopped by itself;
  `length` when max_tokens cut it, calls or not.
- Every tool's `parameters` is bounded in depth (`guided/bounded_json.py`) before the template or
  a schema walk sees it: too deep is a 400 naming `tools`, never a RecursionError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import check_json_depth
from kvspill.guided.spec import GuidedSpec
from kvspill.server.generic_tools import GenericStream, calls_array, generic_schema, parse_generic, tool_lines
from kvspill.server.tool_parsers import (
    ToolCall,
    ToolCallStream,
    array_items,
    calls_of,
    format_for_template,
    parse_tool_calls,
)
from kvspill.text.chat_templates import is_generic

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
    fmt: str  # "generic", or the template's tool-call format (tool_parsers.FORMATS)
    template_tools: list[dict[str, Any]]
    guided: GuidedSpec | None
    named: str | None = None
    parallel: bool = True
    max_calls: int = 1  # forced calls: the array's maxItems


def _schema(tool: Tool) -> dict[str, Any]:
    return tool.function.parameters or _ANY_OBJECT


def plan_tools(
    tools: list[Tool] | None,
    choice: ToolChoice | None,
    parallel: bool | None,
    template: str | None,
    parser: str = "auto",
) -> ToolPlan | None:
    """The plan of a request's tools, or None when it has none (or tool_choice is none).
    `parser`: --tool-call-parser (auto: the format the template teaches)."""
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
    by_name = {t.function.name: t for t in tools}
    named = _named_tool(choice, by_name)
    mode: Literal["auto", "required", "named"] = (
        "named" if named is not None else "required" if choice == "required" else "auto"
    )
    max_calls = 1 if parallel is False or named is not None else len(by_name)
    rendered = [t.model_dump(exclude_none=True) for t in tools]
    plan = ToolPlan(mode, "", rendered, None, named, parallel is not False, max_calls)
    if is_generic(template):
        return _generic_plan(plan, by_name)
    if mode == "named":
        assert named is not None
        spec = GuidedSpec.json_schema(_schema(by_name[named]), "tools")
        return replace(plan, guided=spec)
    if mode == "required":
        array = calls_array({name: _schema(t) for name, t in by_name.items()}, max_calls)
        return replace(plan, guided=GuidedSpec.json_schema(array, "tools"))
    return replace(plan, fmt=format_for_template(template) if parser == "auto" else parser)


def _named_tool(choice: ToolChoice | None, by_name: dict[str, Tool]) -> str | None:
    if not isinstance(choice, NamedToolChoice):
        return None
    if choice.function.name not in by_name:
        raise InvalidParameterError(
            "tool_choice", f"tool_choice names {choice.function.name!r}, not one of `tools`"
        )
    return choice.function.name


def _generic_plan(plan: ToolPlan, by_name: dict[str, Tool]) -> ToolPlan:
    """The generic format: the tools as system-message lines, the answer's JSON by grammar."""
    names = [plan.named] if plan.named is not None else list(by_name)
    schema = generic_schema(
        {name: _schema(by_name[name]) for name in names}, plan.max_calls, allow_text=plan.mode == "auto"
    )
    spec = GuidedSpec.json_schema(schema, "tools")
    return replace(plan, fmt="generic", template_tools=tool_lines(plan.template_tools), guided=spec)


def _forced_calls(plan: ToolPlan, text: str) -> list[ToolCall]:
    """The finished calls of a template's `required` or named answer (none when cut too soon)."""
    if plan.mode == "named":
        assert plan.named is not None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return []
        return (
            [ToolCall(plan.named, json.dumps(value, ensure_ascii=False))] if isinstance(value, dict) else []
        )
    found = array_items(text)
    return (calls_of(found[0]) or []) if found is not None else []


def answer_message(plan: ToolPlan, text: str) -> tuple[str | None, list[ToolCall]]:
    """(content, tool calls) of a finished answer."""
    if plan.fmt == "generic":
        answer = parse_generic(text)
        return answer.content, answer.calls
    if plan.mode == "auto":
        parsed = parse_tool_calls(text, plan.fmt)
        calls = parsed.calls if plan.parallel else parsed.calls[:1]
        return parsed.content, calls
    return None, _forced_calls(plan, text)


def finish_reason(reason: str | None, has_calls: bool) -> str | None:
    return "tool_calls" if has_calls and reason == "stop" else reason


class ToolDeltaStream:
    """One streamed choice: its text deltas as (content delta, tool_calls deltas)."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.auto = ToolCallStream(plan.fmt) if plan.mode == "auto" and plan.fmt != "generic" else None
        self.generic = GenericStream() if plan.fmt == "generic" else None
        self.text = ""
        self.named_id: str | None = None
        self.num_calls = 0

    def feed(self, delta: str, finished: bool) -> tuple[str, list[dict[str, Any]]]:
        if self.generic is not None:
            content, calls = self.generic.feed(delta, finished)
        elif self.auto is not None:
            content, calls = self.auto.feed(delta, finished)
            if not self.plan.parallel:
                calls = [c for c in calls if c["index"] == 0]
        elif self.plan.mode == "named":
            content, calls = "", self._named(delta)
        else:
            content, calls = "", self._required(delta)
        self.num_calls += sum(1 for c in calls if "id" in c)
        return content, calls

    def _named(self, delta: str) -> list[dict[str, Any]]:
        """The arguments stream as the model writes them (guided decoding keeps them valid)."""
        if self.named_id is None:
            self.named_id = ToolCall(self.plan.named or "", "").id
            head = {"index": 0, "id": self.named_id, "type": "function"}
            return [{**head, "function": {"name": self.plan.named, "arguments": delta}}]
        return [{"index": 0, "function": {"arguments": delta}}] if delta else []

    def _required(self, delta: str) -> list[dict[str, Any]]:
        """Each call once, whole, as soon as the array has moved past it."""
        self.text += delta
        calls = _forced_calls(self.plan, self.text)
        new = calls[self.num_calls :]
        return [{"index": self.num_calls + i, **c.as_openai()} for i, c in enumerate(new)]
