"""Refuse JSON-schema keywords the grammar engine would not enforce (a clear 400, never an
output that silently breaks the schema).

The allowed set is what xgrammar's JSON-schema converter turns into grammar rules (checked
against its matcher: tests/guided/test_schema_check.py), plus annotations that constrain nothing.
Remote `$ref`s are refused: nothing is fetched.
"""

from __future__ import annotations

from typing import Any

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


def check_schema(schema: Any, param: str, path: str = "#") -> None:
    """Raise InvalidParameterError naming the first unsupported keyword and where it is."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise InvalidParameterError(param, f"{param}: the schema at {path} must be an object or a boolean")
    for key, value in schema.items():
        where = f"{path}/{key}"
        if key in ANNOTATIONS:
            continue
        if key not in ENFORCED:
            raise InvalidParameterError(
                param,
                f"{param}: the JSON-schema keyword {key!r} (at {where}) is not supported by guided "
                f"decoding here; supported: {', '.join(sorted(ENFORCED))}",
            )
        if key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            raise InvalidParameterError(
                param, f"{param}: only local $refs (#/...) are supported, got {value!r}"
            )
        if key == "format" and value not in FORMATS:
            raise InvalidParameterError(
                param,
                f"{param}: format {value!r} (at {where}) is not supported; supported: {sorted(FORMATS)}",
            )
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                check_schema(sub, param, f"{where}/{name}")
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                check_schema(sub, param, f"{where}/{i}")
        elif key in _SCHEMA_VALUES:
            check_schema(value, param, where)
