"""Static limits on a guided-decoding spec, checked before anything compiles it (`check_static`:
these limits, then for a JSON schema `schema_check`'s keywords and satisfiability).

Compile time grows faster than the input: on a 2-core CPU with SmolLM2's 49K vocabulary
(xgrammar 0.2.9), one object of 800 optional properties compiled in 1.2 s and of 3,000 in 141 s;
a 50,000-string enum took 6.4 s and a schema nested 300 levels 3.3 s. The limits below sit far
below those attack sizes and far above real schemas and tools; what passes them is still bounded
by the compile deadline (`compile_pool.py`).

Invariants:
- Torch-free and linear in the spec's size; nothing here recurses (`bounded_json`).
- Each refusal is an `InvalidParameterError` naming the request field, the limit and its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import MAX_JSON_DEPTH, check_json_depth
from kvspill.guided.schema_check import check_schema
from kvspill.guided.spec import GuidedSpec


@dataclass(frozen=True)
class GuidedLimits:
    # A schema's JSON text. The 3,000-property attack was 60 KB; the largest real tool lists we
    # know (a `tool_choice: required` schema over every tool) stay under 50 KB.
    max_schema_bytes: int = 128 * 1024
    # Properties over every object of a schema. OpenAI's structured outputs took 100 at first and
    # 5,000 later; 1,000 optional properties in one object compile in 3.2 s here, 3,000 in 141 s.
    max_properties: int = 1_000
    # Values of one `enum`, or options of `guided_choice` (OpenAI: 1,000 enum values). 1,000
    # strings compile in 12 ms; the 50,000 of the attack in 6.4 s.
    max_enum_values: int = 1_000
    # Levels of objects and arrays in a schema's JSON, and of groups in a regex or grammar.
    max_depth: int = MAX_JSON_DEPTH
    # GBNF rules (`name ::= ...`) and text. 2,000 rules compile in 0.6 s; real grammars (JSON,
    # SQL, a programming language's expressions) have tens to a few hundred.
    max_grammar_rules: int = 2_000
    max_grammar_bytes: int = 128 * 1024
    # A regular expression's text (real ones: under a few hundred characters).
    max_regex_bytes: int = 4_096


DEFAULT_LIMITS = GuidedLimits()

_RULE = re.compile(r"::=")


def _refuse(param: str, what: str, count: int, name: str, limit: int) -> InvalidParameterError:
    """`what` holds `{n}`, the count found."""
    return InvalidParameterError(
        param,
        f"{param}: {what.format(n=count)}; this server compiles at most {limit} (limit {name}={limit})",
    )


def _num_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))  # a lone surrogate is 3 bytes, not an error


def check_static(spec: GuidedSpec, limits: GuidedLimits = DEFAULT_LIMITS) -> None:
    """Raise InvalidParameterError naming the first limit `spec` passes (or, for a schema, what
    `schema_check` refuses): everything that can be told without compiling, in milliseconds."""
    check = _CHECKS.get(spec.kind)
    if check is not None:
        check(spec.value, spec.param, limits)


def _check_schema(text: str, param: str, limits: GuidedLimits) -> None:
    if (size := _num_bytes(text)) > limits.max_schema_bytes:
        what = "the schema's JSON has {n} bytes"
        raise _refuse(param, what, size, "max_schema_bytes", limits.max_schema_bytes)
    schema = json.loads(text)  # the spec's own text: depth-checked when it was made
    check_json_depth(schema, param, "schema", limits.max_depth)
    _check_schema_counts(schema, param, limits)
    check_schema(schema, param)


def _check_choice(text: str, param: str, limits: GuidedLimits) -> None:
    num_options = len(json.loads(text))
    if num_options > limits.max_enum_values:
        raise _refuse(param, "there are {n} choices", num_options, "max_enum_values", limits.max_enum_values)
    if (size := _num_bytes(text)) > limits.max_grammar_bytes:
        what = "the choices have {n} bytes of JSON"
        raise _refuse(param, what, size, "max_grammar_bytes", limits.max_grammar_bytes)


def _check_regex(text: str, param: str, limits: GuidedLimits) -> None:
    if (size := _num_bytes(text)) > limits.max_regex_bytes:
        raise _refuse(param, "the regex has {n} bytes", size, "max_regex_bytes", limits.max_regex_bytes)
    _check_group_depth(text, param, limits.max_depth)


def _check_grammar(text: str, param: str, limits: GuidedLimits) -> None:
    num_rules = len(_RULE.findall(text))
    if num_rules > limits.max_grammar_rules:
        what = "the grammar has {n} rules"
        raise _refuse(param, what, num_rules, "max_grammar_rules", limits.max_grammar_rules)
    if (size := _num_bytes(text)) > limits.max_grammar_bytes:
        what = "the grammar has {n} bytes"
        raise _refuse(param, what, size, "max_grammar_bytes", limits.max_grammar_bytes)
    _check_group_depth(text, param, limits.max_depth, quoted=True)


def _check_schema_counts(schema: Any, param: str, limits: GuidedLimits) -> None:
    """Properties over the whole schema and the values of each enum. The walk visits every
    object of the document; a property named `properties` or `enum` may be counted twice, which
    only errs towards refusing."""
    num_properties = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        props = node.get("properties")
        if isinstance(props, dict):
            num_properties += len(props)
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > limits.max_enum_values:
            raise _refuse(
                param, "an enum has {n} values", len(enum), "max_enum_values", limits.max_enum_values
            )
        stack.extend(node.values())
    if num_properties > limits.max_properties:
        raise _refuse(
            param, "the schema has {n} properties (over all its objects)", num_properties,
            "max_properties", limits.max_properties,
        )  # fmt: skip


def _check_group_depth(text: str, param: str, max_depth: int, quoted: bool = False) -> None:
    """Nesting of ( ) groups in a regex, or a grammar (`quoted`: skipping "string literals"):
    xgrammar's parsers recurse on them in C++, where running out of stack is a crash."""
    depth = 0
    escaped = in_class = in_string = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_string:
            in_string = ch != '"'
        elif in_class:
            in_class = ch != "]"
        elif quoted and ch == '"':
            in_string = True
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
            if depth > max_depth:
                raise InvalidParameterError(
                    param,
                    f"{param}: groups nest deeper than {max_depth} levels (limit max_depth={max_depth})",
                )
        elif ch == ")":
            depth -= 1


_CHECKS: dict[str, Callable[[str, str, GuidedLimits], None]] = {
    "json_schema": _check_schema,
    "choice": _check_choice,
    "regex": _check_regex,
    "grammar": _check_grammar,
}  # json_object: nothing to bound
