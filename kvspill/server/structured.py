"""Request fields that constrain the output: OpenAI `response_format` and `logit_bias`, vLLM's
`guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`, llama-server's `grammar` and
`json_schema`, vLLM's `structured_outputs`; and the refusal of any field the server does not
implement.

Invariants:
- At most one constraint per request; two are a 400 naming the second.
- `logit_bias` keys are token ids written as strings (OpenAI); a key that is not one is a 400.
- A field the request models do not declare is a 400 naming it (`reject_unknown_fields`), never
  silently ignored, unless it is null, a value that changes nothing here (`store: false`,
  `service_tier: "auto"`, ...) or a hint that never changes an answer (`metadata`).
- `guided_json` given as text is parsed bounded in depth (`guided/bounded_json.py`): too deep
  is a 400, never a RecursionError.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import loads_bounded
from kvspill.guided.spec import GuidedSpec


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = "response"
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs` (its guided_* fields since 0.10), one constraint of them."""

    model_config = ConfigDict(extra="forbid")

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None

    def spec(self) -> GuidedSpec | None:
        param = "structured_outputs"
        given = [k for k in ("json_", "regex", "choice", "grammar") if getattr(self, k) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) > 1:
            names = " and ".join(k.rstrip("_") for k in given)
            raise InvalidParameterError(param, f"structured_outputs: give one constraint, not {names}")
        if self.json_ is not None:
            schema = loads_bounded(self.json_, param, "schema") if isinstance(self.json_, str) else self.json_
            return GuidedSpec.json_schema(schema, param)
        if self.regex is not None:
            return GuidedSpec("regex", self.regex, param)
        if self.choice is not None:
            return GuidedSpec.choice(self.choice, param)
        if self.grammar is not None:
            return GuidedSpec("grammar", self.grammar, param)
        return GuidedSpec("json_object", param=param) if self.json_object else None


# Fields other servers' clients send that change nothing here at these values (a null is every
# field's default): accepted, any other value is a 400 naming it. Identifiers and hints that
# never change an answer (metadata, prompt_cache_key, safety_identifier) are accepted as they come.
_NO_OP_VALUES: dict[str, tuple[Any, ...]] = {
    "store": (False,),  # OpenAI: this server keeps no completions
    "service_tier": ("auto", "default"),
    "modalities": (["text"],),
    "use_beam_search": (False,),  # vLLM
    "priority": (0,),  # vLLM: one priority here
    "spaces_between_special_tokens": (True,),  # vLLM's default, the tokenizer's decoding
}
_HINTS = {"metadata": dict, "prompt_cache_key": str, "safety_identifier": str}


class StructuredFields(BaseModel):
    """Mixed into the completion and chat requests."""

    response_format: ResponseFormat | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    grammar: str | None = None  # llama-server: GBNF
    json_schema: dict[str, Any] | None = None  # llama-server
    logit_bias: dict[str, float] | None = None
    structured_outputs: StructuredOutputs | None = None  # vLLM

    def guided_spec(self) -> GuidedSpec | None:
        specs = [s for s in self._specs() if s is not None]
        if len(specs) > 1:
            raise InvalidParameterError(
                specs[1].param, f"give one output constraint, not both {specs[0].param} and {specs[1].param}"
            )
        return specs[0] if specs else None

    def _specs(self) -> list[GuidedSpec | None]:
        rf = self.response_format
        from_rf = None
        if rf is not None and rf.type == "json_object":
            from_rf = GuidedSpec("json_object", param="response_format")
        elif rf is not None and rf.type == "json_schema":
            if rf.json_schema is None or rf.json_schema.json_schema is None:
                raise InvalidParameterError(
                    "response_format", "response_format json_schema needs json_schema.schema"
                )
            from_rf = GuidedSpec.json_schema(rf.json_schema.json_schema, "response_format")
        guided_json = self.guided_json
        if isinstance(guided_json, str):
            guided_json = loads_bounded(guided_json, "guided_json", "schema")
        return [
            from_rf,
            GuidedSpec.json_schema(guided_json, "guided_json") if guided_json is not None else None,
            GuidedSpec.json_schema(self.json_schema, "json_schema") if self.json_schema is not None else None,
            GuidedSpec("regex", self.guided_regex, "guided_regex") if self.guided_regex is not None else None,
            GuidedSpec.choice(self.guided_choice) if self.guided_choice is not None else None,
            GuidedSpec("grammar", self.guided_grammar, "guided_grammar")
            if self.guided_grammar is not None
            else None,
            GuidedSpec("grammar", self.grammar, "grammar") if self.grammar is not None else None,
            self.structured_outputs.spec() if self.structured_outputs is not None else None,
        ]

    def logit_bias_pairs(self) -> tuple[tuple[int, float], ...]:
        pairs = []
        for key, bias in (self.logit_bias or {}).items():
            try:
                token = int(key)
            except ValueError:
                raise InvalidParameterError(
                    "logit_bias", f"logit_bias keys are token ids, got {key!r}"
                ) from None
            pairs.append((token, float(bias)))
        return tuple(sorted(pairs))

    def constraint_options(self) -> dict[str, Any]:
        """SamplingParams keyword arguments of these fields."""
        self.reject_unknown_fields()
        opts: dict[str, Any] = {}
        if (spec := self.guided_spec()) is not None:
            opts["guided"] = spec
        if self.logit_bias:
            opts["logit_bias"] = self.logit_bias_pairs()
        return opts

    def reject_unknown_fields(self) -> None:
        """A 400 naming the first field the server does not implement; a null, a no-op value
        (`_NO_OP_VALUES`) and a hint (`_HINTS`) are not refused."""
        for name, value in sorted((self.model_extra or {}).items()):
            if value is None:
                continue
            if name in _HINTS and isinstance(value, _HINTS[name]):
                continue
            if name in _NO_OP_VALUES:
                if value in _NO_OP_VALUES[name]:
                    continue
                allowed = " or ".join(repr(v) for v in _NO_OP_VALUES[name])
                raise InvalidParameterError(
                    name,
                    f"`{name}`: {value!r} is not supported by this server; send {allowed} or leave it out",
                )
            raise InvalidParameterError(
                name, f"the field `{name}` is not supported by this server; remove it from the request"
            )
