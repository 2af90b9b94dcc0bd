"""Static limits on guided specs and depth-bounded JSON: each reproduction of issue 48's grammar
denial of service is a 400 naming the limit, in milliseconds, before anything compiles."""

from __future__ import annotations

import time

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import json_depth, loads_bounded, text_depth
from kvspill.guided.limits import DEFAULT_LIMITS, check_static
from kvspill.guided.spec import GuidedSpec

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"],
}


def check_refused(make, match: str) -> InvalidParameterError:
    """The spec `make()` builds (and checks) is refused, naming `match`, within 0.5 s."""
    start = time.monotonic()
    with pytest.raises(InvalidParameterError, match=match) as info:
        check_static(make())
    assert time.monotonic() - start < 0.5
    return info.value


def test_three_thousand_optional_properties() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}
    e = check_refused(lambda: GuidedSpec.json_schema(schema, "guided_json"), "max_properties=1000")
    assert e.param == "guided_json" and "3000" in str(e)


def test_fifty_thousand_string_enum() -> None:
    schema = {"enum": [f"value{i}" for i in range(50_000)]}
    check_refused(lambda: GuidedSpec.json_schema(schema), r"max_schema_bytes|max_enum_values")
    small = {"enum": [f"v{i}" for i in range(5_000)]}  # under the byte limit: the enum's own limit
    check_refused(lambda: GuidedSpec.json_schema(small), "max_enum_values=1000")
    check_refused(lambda: GuidedSpec.choice([f"c{i}" for i in range(5_000)]), "max_enum_values=1000")


def test_three_hundred_levels_of_nesting() -> None:
    schema: dict = {"type": "string"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    with pytest.raises(InvalidParameterError, match="max_depth=64") as info:
        GuidedSpec.json_schema(schema, "json_schema")  # refused as it is made: nothing walks it
    assert info.value.param == "json_schema"


def test_ten_thousand_grammar_rules() -> None:
    grammar = "root::=r0\n" + "\n".join(f'r{i}::="x"r{i + 1}' for i in range(10_000))
    check_refused(lambda: GuidedSpec("grammar", grammar, "guided_grammar"), "max_grammar_rules=2000")


def test_regex_length_and_group_depth() -> None:
    check_refused(lambda: GuidedSpec("regex", "a" * 5000, "guided_regex"), "max_regex_bytes=4096")
    check_refused(lambda: GuidedSpec("regex", "(" * 100 + "a" + ")" * 100, "guided_regex"), "max_depth=64")
    check_static(GuidedSpec("regex", r"[(]{1,99}\(" * 40, "guided_regex"))  # classes and escapes
    check_static(GuidedSpec("grammar", 'root ::= "(((((" ' * 30, "guided_grammar"))  # literals


def test_real_schemas_pass() -> None:
    check_static(GuidedSpec.json_schema(WEATHER))
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(500)}}
    check_static(GuidedSpec.json_schema(wide))
    check_static(GuidedSpec.choice(["yes", "no"]))
    check_static(GuidedSpec("json_object"))
    assert DEFAULT_LIMITS.max_properties == 1000


def test_a_hundred_thousand_levels_never_raise_recursion_error() -> None:
    text = '{"a":' * 100_000 + "1" + "}" * 100_000
    with pytest.raises(InvalidParameterError, match="max_depth=64"):
        loads_bounded(text, "guided_json", "schema")
    deep: object = 1
    for _ in range(100_000):
        deep = {"a": deep}
    assert json_depth(deep, stop_above=64) == 65
    with pytest.raises(InvalidParameterError, match="max_depth=64"):
        GuidedSpec.json_schema(deep)  # type: ignore[arg-type]


def test_text_depth_skips_strings() -> None:
    assert text_depth('{"a": "[[[{{{"}') == 1
    assert text_depth('{"a": "x\\"[["}') == 1
    assert text_depth('{"a": "x\\\\", "b": [[1]]}') == 3
    assert text_depth("[]") == 1 and text_depth("7") == 0
    with pytest.raises(InvalidParameterError, match="not valid JSON"):
        loads_bounded("{", "messages", "tool call's arguments object")


def test_annotations_do_not_change_the_cache_key() -> None:
    a = GuidedSpec.json_schema({**WEATHER, "description": "one", "title": "w"})
    b = GuidedSpec.json_schema({**WEATHER, "description": "two"})
    assert a.cache_key == b.cache_key == GuidedSpec.json_schema(WEATHER).cache_key
    named = {"type": "object", "properties": {"description": {"type": "string"}}}
    assert '"description"' in GuidedSpec.json_schema(named).value  # a property, not an annotation
