"""Refuse JSON schemas whose answer would silently break them: keywords the grammar engine would
not enforce, and schemas no value can satisfy (a clear 400 naming the place, never an output
that breaks the schema). Also the schema's canonical form, the compiled-grammar cache's key.

The allowed set is what xgrammar's JSON-schema converter turns into grammar rules, plus
annotations that constrain nothing. Remote `$ref`s are refused: nothing is fetched.
Unsatisfiable: `enum: []`, `type: []`, `anyOf: []`, a min above its max (items, length,
properties, numbers), a `required` name `properties` does not define (xgrammar never writes
one it has no schema for: the answer would lack it) or defines as `false`, more `required` names
than `maxProperties`, an `enum`/`const` value of another `type`, and `pattern` beside
`minLength`/`maxLength` (xgrammar enforces the pattern and drops the lengths).

Invariants:
- Iterative walks: no schema makes them recurse (the server bounds depth before this runs).
- A canonical schema is the same schema without annotations: what xgrammar compiles from both is
  the same grammar, so a new `description` does not cost a new compile.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeGuard

from kvspill.errors import InvalidParameterError

ENFORCED = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "enum",
        "const", "anyOf", "$ref", "$defs", "definitions", "minItems", "maxItems", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    }
)  # fmt: skip
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
     "readOnly", "writeOnly"}
)  # fmt: skip
FORMATS = frozenset(
    {"date", "time", "date-time", "duration", "email", "uuid", "uri", "uri-reference", "ipv4", "ipv6",
     "hostname"}
)  # fmt: skip
# Keywords whose value is a map of name -> subschema, or a list of subschemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "propertyNames")
_RANGES = (("minItems", "maxItems"), ("minLength", "maxLength"), ("minProperties", "maxProperties"))
_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _subschemas(schema: dict[str, Any], path: str) -> Iterator[tuple[Any, str]]:
    """(subschema, its path) for every keyword of `schema` that holds subschemas."""
    for key, value in schema.items():
        where = f"{path}/{key}"
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            yield from ((sub, f"{where}/{name}") for name, sub in value.items())
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            yield from ((sub, f"{where}/{i}") for i, sub in enumerate(value))
        elif key in _SCHEMA_VALUES:
            yield value, where


def check_schema(schema: Any, param: str, path: str = "#") -> None:
    """Raise InvalidParameterError naming the first unsupported keyword or unsatisfiable part."""
    if schema is False:
        raise InvalidParameterError(param, f"{param}: the schema at {path} is `false`: no value matches it")
    stack = [(schema, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise InvalidParameterError(
                param, f"{param}: the schema at {where} must be an object or a boolean"
            )
        for key, value in node.items():
            _check_keyword(key, value, param, f"{where}/{key}")
        _check_satisfiable(node, param, where)
        stack.extend(reversed(list(_subschemas(node, where))))


def _check_keyword(key: str, value: Any, param: str, where: str) -> None:
    if key in ANNOTATIONS:
        return
    if key not in ENFORCED:
        raise InvalidParameterError(
            param,
            f"{param}: the JSON-schema keyword {key!r} (at {where}) is not supported by guided "
            f"decoding here; supported: {', '.join(sorted(ENFORCED))}",
        )
    if key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
        raise InvalidParameterError(param, f"{param}: only local $refs (#/...) are supported, got {value!r}")
    if key == "format" and value not in FORMATS:
        raise InvalidParameterError(
            param,
            f"{param}: format {value!r} (at {where}) is not supported; supported: {sorted(FORMATS)}",
        )


def _unsatisfiable(param: str, where: str, why: str) -> InvalidParameterError:
    return InvalidParameterError(param, f"{param}: no value can satisfy the schema at {where}: {why}")


def _check_satisfiable(node: dict[str, Any], param: str, where: str) -> None:
    for key in ("enum", "type", "anyOf"):
        if node.get(key) == []:
            raise _unsatisfiable(param, f"{where}/{key}", f"`{key}` is an empty list")
    for low, high in _RANGES:
        lo, hi = node.get(low), node.get(high)
        if _is_number(lo) and _is_number(hi) and lo > hi:
            raise _unsatisfiable(param, where, f"{low} {lo} is greater than {high} {hi}")
    _check_numeric_range(node, param, where)
    _check_required(node, param, where)
    _check_value_types(node, param, where)
    if "pattern" in node and ("minLength" in node or "maxLength" in node):
        raise InvalidParameterError(
            param,
            f"{param}: minLength/maxLength beside a pattern (at {where}) are not enforced by guided "
            "decoding here (the pattern is): write the length into the pattern, e.g. ^[a-z]{1,8}$",
        )


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_numeric_range(node: dict[str, Any], param: str, where: str) -> None:
    lows = [
        (k, node[k], k == "exclusiveMinimum")
        for k in ("minimum", "exclusiveMinimum")
        if _is_number(node.get(k))
    ]
    highs = [
        (k, node[k], k == "exclusiveMaximum")
        for k in ("maximum", "exclusiveMaximum")
        if _is_number(node.get(k))
    ]
    for low_key, lo, lo_open in lows:
        for high_key, hi, hi_open in highs:
            if lo > hi or (lo == hi and (lo_open or hi_open)):
                raise _unsatisfiable(param, where, f"{low_key} {lo} leaves nothing below {high_key} {hi}")


def _check_required(node: dict[str, Any], param: str, where: str) -> None:
    required = node.get("required")
    if not isinstance(required, list):
        return
    props = node.get("properties")
    props = props if isinstance(props, dict) else {}
    for name in required:
        if name not in props:
            raise _unsatisfiable(
                param,
                f"{where}/required",
                f"it requires {name!r}, which `properties` does not define (guided decoding cannot "
                "write a property it has no schema for): add it to properties",
            )
        if props[name] is False:
            raise _unsatisfiable(
                param, f"{where}/properties/{name}", f"required {name!r} has the schema `false`"
            )
    most = node.get("maxProperties")
    if _is_number(most) and len(set(required)) > most:
        raise _unsatisfiable(param, where, f"{len(set(required))} required properties, maxProperties {most}")


def _check_value_types(node: dict[str, Any], param: str, where: str) -> None:
    """An enum or const value of a type `type` excludes: xgrammar would write it anyway."""
    declared = node.get("type")
    types = [declared] if isinstance(declared, str) else declared
    if not isinstance(types, list) or not all(t in _JSON_TYPES for t in types):
        return
    values = list(node["enum"]) if isinstance(node.get("enum"), list) else []
    if "const" in node:
        values.append(node["const"])
    for value in values:
        if not any(_JSON_TYPES[t](value) for t in types):
            raise _unsatisfiable(param, where, f"the value {value!r} is not of type {declared}")


def canonical_schema(schema: Any) -> Any:
    """`schema` without annotations (title, description, ...) wherever a subschema stands; every
    other keyword, unknown ones included, is kept (subschemas copied, other values shared)."""
    if not isinstance(schema, dict):
        return schema
    root: dict[str, Any] = {}
    stack: list[tuple[dict[str, Any], dict[str, Any]]] = [(schema, root)]
    while stack:
        src, dst = stack.pop()
        for key, value in src.items():
            if key in ANNOTATIONS:
                continue
            dst[key] = _canonical_child(key, value, stack)
    return root


def _canonical_child(key: str, value: Any, stack: list[tuple[dict[str, Any], dict[str, Any]]]) -> Any:
    """The copy of one keyword's value; subschemas go on `stack` to be filled in."""

    def sub(item: Any) -> Any:
        if not isinstance(item, dict):
            return item
        copy: dict[str, Any] = {}
        stack.append((item, copy))
        return copy

    if key in _SCHEMA_MAPS and isinstance(value, dict):
        return {name: sub(item) for name, item in value.items()}
    if key in _SCHEMA_LISTS and isinstance(value, list):
        return [sub(item) for item in value]
    if key in _SCHEMA_VALUES:
        return sub(value)
    return value
