"""The generic tool-call format: tools on a model whose chat template has no tool support.

As llama-server's `--jinja` generic fallback does (our own shapes and code): the tools go into the
system message (the template prelude of `text/chat_templates.py`, one JSON line per tool), and the
model answers one JSON object, which guided decoding enforces:
- `{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}`: calls, each item matching one tool's
  name and parameter schema, between 1 and `max_calls` items;
- `{"response": "..."}`: a text answer, allowed with tool_choice `auto` only.
`required` allows the calls object only, a named choice the calls object with that one tool and
one item; `auto` allows both (an `anyOf` grammar).

Invariants:
- The answer is parsed back into OpenAI shapes: `tool_calls`, or the response string as content;
  the JSON wrapper is never content.
- An answer cut short (max_tokens) keeps the calls it finished and the response text it wrote;
  an unfinished call is dropped, never returned as content.
- `GenericStream` sends the response text as it comes and each call once, whole, as soon as the
  array has moved past it; its deltas add up to `parse_generic` of the whole text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kvspill.server.tool_parsers import ToolCall, array_items, calls_of

_CALLS_HEAD = re.compile(r'\s*\{\s*"tool_calls"\s*:\s*')
_RESPONSE_HEAD = re.compile(r'\s*\{\s*"response"\s*:\s*"')
# a cut string may end inside an escape: `\`, `\u12`, or the first half of a surrogate pair
_CUT_ESCAPE = re.compile(r"(\\u[dD][89abAB][0-9a-fA-F]{2}(\\u?[0-9a-fA-F]{0,3})?|\\u[0-9a-fA-F]{0,3}|\\)$")


def tool_lines(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the system message shows of each tool: name, description, parameters."""
    lines = []
    for t in tools:
        f = t["function"]
        line = {"name": f["name"]}
        if f.get("description"):
            line["description"] = f["description"]
        line["parameters"] = f.get("parameters") or {"type": "object"}
        lines.append(line)
    return lines


def call_item(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One call of tool `name`: `name` first, so the model picks the tool before its arguments."""
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": parameters},
        "required": ["name", "arguments"],
    }


def calls_array(schemas: dict[str, dict[str, Any]], max_calls: int) -> dict[str, Any]:
    """A JSON array of 1 to `max_calls` calls of the tools in `schemas` (name: parameters)."""
    items = [call_item(name, params) for name, params in schemas.items()]
    return {
        "type": "array",
        "items": items[0] if len(items) == 1 else {"anyOf": items},
        "minItems": 1,
        "maxItems": max_calls,
    }


def generic_schema(schemas: dict[str, dict[str, Any]], max_calls: int, allow_text: bool) -> dict[str, Any]:
    calls = {
        "type": "object",
        "properties": {"tool_calls": calls_array(schemas, max_calls)},
        "required": ["tool_calls"],
    }
    if not allow_text:
        return calls
    text = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
    return {"anyOf": [calls, text]}


@dataclass(frozen=True)
class GenericAnswer:
    content: str | None
    calls: list[ToolCall]
    calls_closed: bool  # the calls array closed: every call the model meant is there


def parse_generic(text: str) -> GenericAnswer:
    """The content or calls of a (possibly cut) generic answer."""
    if (m := _CALLS_HEAD.match(text)) is not None:
        found = array_items(text[m.end() :])
        if found is not None:
            calls = calls_of(found[0])
            if calls is not None:
                return GenericAnswer(None, calls, found[1])
        return GenericAnswer(None, [], False)
    if (m := _RESPONSE_HEAD.match(text)) is not None:
        return GenericAnswer(_string_prefix(text[m.end() :]), [], False)
    if text.lstrip().startswith("{"):
        return GenericAnswer(None, [], False)  # the wrapper cut before its key: nothing to show
    return GenericAnswer(text or None, [], False)  # not guided (it cannot happen with a grammar)


def _string_prefix(body: str) -> str:
    """The decoded text of a JSON string's body (after its opening quote), whole or cut short."""
    try:
        value, _ = json.JSONDecoder().raw_decode('"' + body)
        return str(value)
    except json.JSONDecodeError:
        pass  # cut short: decode what is surely whole
    safe = _CUT_ESCAPE.sub("", body)
    try:
        return str(json.loads('"' + safe + '"'))
    except json.JSONDecodeError:
        return ""


class GenericStream:
    """A generic answer's text deltas as (content delta, tool_calls deltas)."""

    def __init__(self) -> None:
        self.text = ""
        self.sent_content = 0
        self.calls: list[ToolCall] = []

    def feed(self, delta: str, finished: bool) -> tuple[str, list[dict[str, Any]]]:
        self.text += delta
        if not finished and not (_CALLS_HEAD.match(self.text) or _RESPONSE_HEAD.match(self.text)):
            return "", []  # the answer's first characters decide what it is: wait for them
        answer = parse_generic(self.text)
        content = answer.content or ""
        out = content[self.sent_content :]
        self.sent_content = max(self.sent_content, len(content))
        new = answer.calls[len(self.calls) :]
        deltas = [{"index": len(self.calls) + i, **c.as_openai()} for i, c in enumerate(new)]
        self.calls.extend(new)
        return out, deltas
