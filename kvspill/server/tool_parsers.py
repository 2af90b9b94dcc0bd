"""Tool calls in a model's text, in the formats of the families we serve, whole or streamed.

Formats (chosen from the chat template, `format_for_template`):
- `hermes` (Qwen2.5, Qwen3, Hermes; the fallback): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
  one tag per call, text before the first tag is content;
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the v11 form
  `[TOOL_CALLS]name[ARGS]{...}`; the marker is a special token the detokenizer drops, so a text
  that starts with `[{"name"` counts too;
- `llama3_json` (Llama 3.1/3.2): the whole answer is `{"name": ..., "parameters": {...}}`, optionally
  after `<|python_tag|>`, several separated by `;`.

Invariants:
- Text that does not parse as tool calls is content: a model that writes a broken call loses no text.
- `ToolCallStream` emits each call once, whole (id, name and arguments in one delta) as soon as its
  JSON is complete; content is emitted as it comes, holding back only what could still begin a
  tool-call marker. Concatenating its deltas gives `parse_tool_calls` of the whole text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("hermes", "mistral", "llama3_json")
_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_MISTRAL_MARK = "[TOOL_CALLS]"
_PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text of the arguments object
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ParsedOutput:
    content: str | None
    calls: list[ToolCall]


def format_for_template(template: str | None) -> str:
    """The tool-call format a chat template teaches its model (hermes when it says nothing known)."""
    text = template or ""
    if _MISTRAL_MARK in text:
        return "mistral"
    if _PYTHON_TAG in text or ('"parameters"' in text and "<tool_call>" not in text):
        return "llama3_json"
    return "hermes"


def _call_from_json(obj: Any) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _json_values(text: str) -> tuple[list[Any], str]:
    """The JSON values at the start of `text`, separated by whitespace or `;`, and what is left."""
    values: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n;":
            pos += 1
        if pos >= len(text):
            return values, ""
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return values, text[pos:]
        values.append(value)


def array_items(text: str) -> tuple[list[Any], bool] | None:
    """The whole items of the JSON array `text` opens, and whether it closed; None when `text`
    opens no array. A cut array (generation stopped at max_tokens) gives the items it finished:
    an object or array once it closed, any other value once a `,` or `]` follows it (a number
    cut at `12` of `123` is not a finished one)."""
    pos = len(text) - len(text.lstrip())
    if not text.startswith("[", pos):
        return None
    items: list[Any] = []
    pos += 1
    while True:
        pos = _skip_space(text, pos)
        if text.startswith("]", pos):
            return items, True
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return items, False
        pos = _skip_space(text, end)
        if pos >= len(text):
            return (items + [value] if isinstance(value, dict | list) else items), False
        if text[pos] not in ",]":
            return items, False  # not JSON: nothing after this item is an item
        items.append(value)
        pos += 1 if text[pos] == "," else 0


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def calls_of(values: list[Any]) -> list[ToolCall] | None:
    """Tool calls of decoded `{"name", "arguments"}` objects; None when one is not a call."""
    calls = [_call_from_json(v) for v in values]
    return None if any(c is None for c in calls) else [c for c in calls if c is not None]


def _parse_hermes(text: str) -> ParsedOutput | None:
    start = text.find(_HERMES_OPEN)
    if start < 0:
        return None
    calls = []
    for body in re.findall(
        re.escape(_HERMES_OPEN) + r"(.*?)(?:" + re.escape(_HERMES_CLOSE) + "|$)", text[start:], re.S
    ):
        values, rest = _json_values(body.strip())
        if len(values) != 1 or rest.strip() or (call := _call_from_json(values[0])) is None:
            return None
        calls.append(call)
    return ParsedOutput(text[:start].strip() or None, calls)


def _parse_mistral(text: str) -> ParsedOutput | None:
    start = text.find(_MISTRAL_MARK)
    body = text[start + len(_MISTRAL_MARK) :] if start >= 0 else text.lstrip()
    content = text[:start].strip() or None if start >= 0 else None
    if start < 0 and not body.startswith("[{"):
        return None
    if "[ARGS]" in body:  # v11: name[ARGS]{...}, repeated
        calls = []
        for part in body.split(_MISTRAL_MARK):
            name, _, args = part.partition("[ARGS]")
            values, rest = _json_values(args)
            if (
                len(values) != 1
                or rest.strip()
                or (call := _call_from_json({"name": name.strip(), "arguments": values[0]})) is None
            ):
                return None
            calls.append(call)
        return ParsedOutput(content, calls)
    values, rest = _json_values(body)
    if len(values) != 1 or rest.strip() or not isinstance(values[0], list):
        return None
    parsed = [_call_from_json(v) for v in values[0]]
    if not parsed or any(c is None for c in parsed):
        return None
    return ParsedOutput(content, [c for c in parsed if c is not None])


def _parse_llama(text: str) -> ParsedOutput | None:
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG) :]
    if not body.lstrip().startswith("{"):
        return None
    values, rest = _json_values(body)
    calls = [_call_from_json(v) for v in values]
    if not calls or rest.strip() or any(c is None for c in calls):
        return None
    return ParsedOutput(None, [c for c in calls if c is not None])


_PARSERS = {"hermes": _parse_hermes, "mistral": _parse_mistral, "llama3_json": _parse_llama}


def parse_tool_calls(text: str, fmt: str) -> ParsedOutput:
    """The content and tool calls of a finished answer; no calls when it does not parse."""
    parsed = _PARSERS[fmt](text)
    return parsed if parsed is not None and parsed.calls else ParsedOutput(text, [])


def _tool_start(text: str, fmt: str) -> int | None:
    """Where the tool-call part of `text` begins, if it has begun."""
    if fmt == "hermes":
        i = text.find(_HERMES_OPEN)
        return i if i >= 0 else None
    if fmt == "mistral":
        i = text.find(_MISTRAL_MARK)
        if i >= 0:
            return i
        return 0 if text.lstrip().startswith("[") else None
    stripped = text.lstrip()
    return 0 if stripped.startswith(("{", _PYTHON_TAG)) else None


def _held_back(text: str, fmt: str) -> int:
    """How many trailing characters could still begin a marker (kept back from the content)."""
    if fmt != "hermes" and (
        not text.strip() or (fmt == "llama3_json" and _PYTHON_TAG.startswith(text.lstrip()))
    ):
        return len(text)  # the JSON formats are decided by the answer's first characters
    if fmt == "llama3_json":
        return 0
    marker = _HERMES_OPEN if fmt == "hermes" else _MISTRAL_MARK
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


class ToolCallStream:
    """Turns a choice's text deltas into OpenAI chat deltas: content, then tool_calls."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.text = ""
        self.sent_content = 0  # characters of `text` sent as content
        self.calls: list[ToolCall] = []

    def feed(self, delta: str, finished: bool) -> tuple[str, list[dict[str, Any]]]:
        """(content delta, tool_call deltas) for `delta`; at `finished`, everything that is left."""
        self.text += delta
        start = _tool_start(self.text, self.fmt)
        if start is None:
            end = len(self.text) if finished else len(self.text) - _held_back(self.text, self.fmt)
            return self._content_to(end), []
        content = self._content_to(start)
        parsed = _PARSERS[self.fmt](self.text)
        found = parsed.calls if parsed is not None else []
        if not finished:
            found = found[: self._complete_calls(found)]
        elif not found:  # it looked like a call but is not one: it was content after all
            return content + self._content_to(len(self.text)), []
        new = found[len(self.calls) :]
        deltas = [{"index": len(self.calls) + i, **c.as_openai()} for i, c in enumerate(new)]
        self.calls.extend(new)
        return content, deltas

    def _complete_calls(self, found: list[ToolCall]) -> int:
        """Calls surely complete mid-stream: for hermes those whose tag is closed; for the JSON
        formats all but the last one (its value may still grow: `{"a": 1` then `2}`)."""
        if self.fmt == "hermes":
            return min(len(found), self.text.count(_HERMES_CLOSE))
        return max(0, len(found) - 1)

    def _content_to(self, end: int) -> str:
        if end <= self.sent_content:
            return ""
        out = self.text[self.sent_content : end]
        self.sent_content = end
        return out
