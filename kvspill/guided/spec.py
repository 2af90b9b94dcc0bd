"""What a request's output must match (torch-free: `SamplingParams` carries it).

Kinds: `json_schema` (a JSON schema, as JSON text), `json_object` (any JSON object), `regex`,
`choice` (one of several strings, as a JSON list) and `grammar` (GBNF, llama.cpp's and
xgrammar's EBNF dialect). `param` is the request field it came from: errors name it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvspill.errors import InvalidParameterError

GUIDED_KINDS = ("json_schema", "json_object", "regex", "choice", "grammar")


@dataclass(frozen=True)
class GuidedSpec:
    kind: str
    value: str = ""
    param: str = "response_format"

    def __post_init__(self) -> None:
        if self.kind not in GUIDED_KINDS:
            raise InvalidParameterError(self.param, f"unknown guided decoding kind {self.kind!r}")
        if self.kind != "json_object" and not self.value:
            raise InvalidParameterError(self.param, f"{self.param}: the {self.kind} must not be empty")

    @classmethod
    def json_schema(cls, schema: object, param: str = "response_format") -> GuidedSpec:
        if not isinstance(schema, dict):
            raise InvalidParameterError(param, f"{param}: a JSON schema must be an object")
        return cls("json_schema", json.dumps(schema, sort_keys=True), param)

    @classmethod
    def choice(cls, options: list[str], param: str = "guided_choice") -> GuidedSpec:
        if not options or any(not isinstance(o, str) or not o for o in options):
            raise InvalidParameterError(param, f"{param}: give a non-empty list of non-empty strings")
        return cls("choice", json.dumps(options), param)

    @property
    def cache_key(self) -> tuple[str, str]:
        return (self.kind, self.value)
