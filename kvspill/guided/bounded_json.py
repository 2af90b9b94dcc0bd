"""JSON from clients, bounded in nesting depth: measured and parsed without recursion.

Python's `json.loads` and `json.dumps`, pydantic and any recursive walk raise `RecursionError`
somewhere near 1,000 levels (the interpreter's recursion limit, less the frames already on the
stack); raised inside a handler that is a 500 and, from a C extension, sometimes a reset
connection. A client may nest as deep as its body allows (`{"a":` repeated 100,000 times is 600 KB).

Invariants:
- `json_depth` and `text_depth` are iterative: no input makes them recurse.
- `loads_bounded` measures the text's depth before it parses, so `json.loads` never meets a
  document deeper than `max_depth`; a `RecursionError` it raises anyway is still a 400.
- Every refusal is an `InvalidParameterError` naming the request field and the limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvspill.errors import InvalidParameterError

# Nesting levels (objects and arrays) a JSON value from a client may have. A JSON schema spends
# two levels per schema level ({"properties": {"x": {...}}}), so 64 is 32 schema levels: the
# deepest real schemas we know nest under 10 objects (OpenAI's structured outputs allow 10). A
# 300-level schema stalled xgrammar's compiler for 3.3 s (2-core CPU, SmolLM2's vocabulary).
MAX_JSON_DEPTH = 64

# The characters that change depth or string state; everything else is skipped by the regex.
_STRUCTURE = re.compile(r'[\[\]{}"\\]')


def json_depth(value: Any, stop_above: int | None = None) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, `{}` and `[]` are 1); with
    `stop_above`, returns as soon as the depth passes it (a lower bound then)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if stop_above is not None and deepest > stop_above:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def text_depth(text: str, stop_above: int | None = None) -> int:
    """Nesting depth of JSON text, brackets inside strings skipped (malformed text gets a number
    too: the parser reports what is wrong with it); with `stop_above`, returns once past it."""
    depth = deepest = 0
    in_string = False
    for match in _STRUCTURE.finditer(text):
        ch = match.group()
        if in_string:
            # a backslash matters only as the escape of a quote (each run of them is walked once)
            if ch == '"' and not _is_escaped(text, match.start()):
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if stop_above is not None and deepest > stop_above:
                return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _is_escaped(text: str, index: int) -> bool:
    """Whether text[index] follows an odd run of backslashes."""
    run = 0
    while index - run - 1 >= 0 and text[index - run - 1] == "\\":
        run += 1
    return run % 2 == 1


def too_deep(param: str, what: str, max_depth: int) -> InvalidParameterError:
    return InvalidParameterError(
        param,
        f"{param}: the {what} nests deeper than {max_depth} levels of objects and arrays "
        f"(limit max_depth={max_depth}): flatten it",
    )


def check_json_depth(value: Any, param: str, what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse a parsed value nested deeper than `max_depth`."""
    if json_depth(value, stop_above=max_depth) > max_depth:
        raise too_deep(param, what, max_depth)


def loads_bounded(text: str, param: str, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(text)`, refusing (400) text that is not JSON or nests deeper than `max_depth`."""
    if text_depth(text, stop_above=max_depth) > max_depth:
        raise too_deep(param, what, max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidParameterError(param, f"{param}: the {what} is not valid JSON: {e}") from e
    except RecursionError as e:  # not reached after the depth check; a 400 all the same
        raise too_deep(param, what, max_depth) from e
