"""Schemas guided decoding would break are refused, naming where: unsupported keywords, and
schemas no value satisfies (xgrammar accepts some of those and writes answers that break them)."""

from __future__ import annotations

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.guided.schema_check import check_schema

OBJ = {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize(
    ("schema", "where", "why"),
    [
        ({"type": "array", "minItems": 3, "maxItems": 1}, "#", "minItems 3 is greater than maxItems 1"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "#", "minLength 5"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "#", "minimum 5"),
        ({"type": "number", "exclusiveMinimum": 2, "maximum": 2}, "#", "exclusiveMinimum 2"),
        ({"type": "object", "minProperties": 3, "maxProperties": 1}, "#", "minProperties 3"),
        ({**OBJ, "required": ["b"], "additionalProperties": False}, "#/required", "requires 'b'"),
        ({**OBJ, "required": ["b"]}, "#/required", "requires 'b'"),  # xgrammar writes {"a": ...}
        ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "#/properties/a", "false"),
        ({**OBJ, "required": ["a", "a"], "maxProperties": 0}, "#", "maxProperties 0"),
        ({"properties": {"x": {"enum": []}}}, "#/properties/x/enum", "empty list"),
        ({"type": []}, "#/type", "empty list"),
        ({"anyOf": []}, "#/anyOf", "empty list"),
        ({"type": "string", "enum": ["a", 1]}, "#", "1 is not of type string"),
        ({"type": ["string", "integer"], "const": True}, "#", "True is not of type"),
        ({"items": {"type": "integer", "minimum": 3, "exclusiveMaximum": 3}}, "#/items", "minimum 3"),
    ],
)
def test_unsatisfiable_is_refused_naming_where(schema: dict, where: str, why: str) -> None:
    with pytest.raises(InvalidParameterError, match="no value can satisfy") as info:
        check_schema(schema, "guided_json")
    message = str(info.value)
    assert info.value.param == "guided_json"
    assert f"at {where}:" in message and why in message, message


def test_false_root_and_unenforced_lengths() -> None:
    with pytest.raises(InvalidParameterError, match="at # is `false`"):
        check_schema(False, "response_format")
    with pytest.raises(InvalidParameterError, match="minLength/maxLength beside a pattern"):
        check_schema({"type": "string", "pattern": "^a+$", "maxLength": 3}, "response_format")
    with pytest.raises(InvalidParameterError, match="'not' .at #/properties/a/not."):
        check_schema({"properties": {"a": {"not": {}}}}, "response_format")


def test_satisfiable_schemas_pass() -> None:
    check_schema({**OBJ, "required": ["a"], "additionalProperties": False}, "p")
    check_schema({"type": "integer", "minimum": 3, "maximum": 3}, "p")
    check_schema({"type": "number", "enum": [1, 2.5]}, "p")
    check_schema({"type": "integer", "const": 2.0}, "p")
    check_schema({"type": "array", "items": True, "minItems": 0, "maxItems": 0}, "p")
    check_schema({"anyOf": [{"type": "null"}, {"$ref": "#/$defs/x"}], "$defs": {"x": OBJ}}, "p")


def test_a_deep_schema_does_not_recurse() -> None:
    schema: dict = {"type": "string"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    check_schema(schema, "p")  # iterative: no RecursionError (the server bounds depth earlier)
