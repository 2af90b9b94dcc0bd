"""What a request's output must match (torch-free: `SamplingParams` carries it).

Kinds: `json_schema` (a JSON schema, as JSON text), `json_object` (any JSON object), `regex`,
`choice` (one of several strings, as a JSON list) and `grammar` (GBNF, llama.cpp's and
xgrammar's EBNF dialect). `param` is the request field it came from: errors name it.

Invariants:
- A spec's identity (equality, hash, `cache_key`) is (kind, value, param); a JSON schema's value
  is its canonical JSON (annotations dropped: `schema_check.canonical_schema`) with the keys in
  the schema's order, because xgrammar makes the model write an object's properties in that
  order, as OpenAI's strict mode and vLLM do (`reasoning` before `answer`, a tool call's `name`
  before its `arguments`).
- A schema nested deeper than `bounded_json.MAX_JSON_DEPTH` is refused before anything walks it.
- `compiled` (the grammar compiled for it, off the engine thread) is not part of its identity and
  never leaves its process: a pickled spec (tensor-parallel workers get the step's requests
  pickled) drops it, and the receiver compiles its own. xgrammar's compiled grammars do not
  pickle, and serializing one took 15x its compile time (800 optional properties: 1.2 s to
  compile, 17 s to serialize, 4.5 s to read back; 2-core CPU).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import check_json_depth
from kvspill.guided.schema_check import canonical_schema

GUIDED_KINDS = ("json_schema", "json_object", "regex", "choice", "grammar")


@dataclass(frozen=True)
class GuidedSpec:
    kind: str
    value: str = ""
    param: str = "response_format"
    compiled: object | None = field(default=None, compare=False, repr=False)  # see the module doc

    def __post_init__(self) -> None:
        if self.kind not in GUIDED_KINDS:
            raise InvalidParameterError(self.param, f"unknown guided decoding kind {self.kind!r}")
        if self.kind != "json_object" and not self.value:
            raise InvalidParameterError(self.param, f"{self.param}: the {self.kind} must not be empty")

    @classmethod
    def json_schema(cls, schema: object, param: str = "response_format") -> GuidedSpec:
        if not isinstance(schema, dict):
            raise InvalidParameterError(param, f"{param}: a JSON schema must be an object")
        check_json_depth(schema, param, "schema")  # before json.dumps or any walk recurses into it
        return cls("json_schema", json.dumps(canonical_schema(schema)), param)

    @classmethod
    def choice(cls, options: list[str], param: str = "guided_choice") -> GuidedSpec:
        if not options or any(not isinstance(o, str) or not o for o in options):
            raise InvalidParameterError(param, f"{param}: give a non-empty list of non-empty strings")
        return cls("choice", json.dumps(options), param)

    @property
    def cache_key(self) -> tuple[str, str]:
        return (self.kind, self.value)

    def with_compiled(self, compiled: object) -> GuidedSpec:
        """This spec carrying its compiled grammar (for the engine and runner to use as it is)."""
        return replace(self, compiled=compiled)

    def __reduce__(self) -> tuple[Any, ...]:
        return (GuidedSpec, (self.kind, self.value, self.param))  # without `compiled`: module doc
