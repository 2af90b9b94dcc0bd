"""Guided decoding and logit_bias through the engine (tiny Llama, SmolLM2's tokenizer, CPU)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from kvspill.errors import InvalidParameterError
from kvspill.guided.spec import GuidedSpec
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 5},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", "fish"]},
    },
    "required": ["name", "age", "pet"],
    "additionalProperties": False,
}


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llm(tiny_smol_vocab_dir) -> LLM:
    return LLM(str(tiny_smol_vocab_dir), device="cpu", dtype="float32")


def _generate(llm: LLM, spec: GuidedSpec, num: int, **opts):
    params = [SamplingParams(max_tokens=48, seed=i, guided=spec, **opts) for i in range(num)]
    return llm.generate([[1, 100]] * num, params)


def test_json_schema_50_seeded_samples_at_temperature_1_all_validate(llm):
    outs = _generate(llm, GuidedSpec.json_schema(SCHEMA), 50, temperature=1.0)
    for out in outs:
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), SCHEMA)
        assert list(json.loads(out.text)) == ["name", "age", "pet"]  # the schema's order (OpenAI's)
    assert len({o.text for o in outs}) > 10  # the draws differ: the mask did not collapse them


def test_async_scheduling_advances_the_matchers_from_resolved_tokens(tiny_smol_vocab_dir):
    """With async scheduling the runner resolves the previous step's placeholders before masking."""
    llm = LLM(str(tiny_smol_vocab_dir), device="cpu", dtype="float32", async_scheduling=True)
    for out in _generate(llm, GuidedSpec.json_schema(SCHEMA), 3, temperature=1.0):
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), SCHEMA)


@pytest.mark.parametrize("opts", [{"temperature": 0.0}, {"temperature": 0.8, "top_p": 0.9, "top_k": 50}])
def test_json_schema_in_every_sampling_mode(llm, opts):
    for out in _generate(llm, GuidedSpec.json_schema(SCHEMA), 1, **opts):
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), SCHEMA)


def test_json_object(llm):
    (out,) = _generate(llm, GuidedSpec("json_object"), 1, temperature=1.0)
    assert out.finish_reason == "length" or isinstance(json.loads(out.text), dict)


def test_regex_and_choice_hold(llm):
    for out in _generate(llm, GuidedSpec("regex", r"[a-z]{3}-\d{2}"), 10, temperature=1.0):
        assert re.fullmatch(r"[a-z]{3}-\d{2}", out.text), out.text
    options = ["yes", "no", "maybe later"]
    outs = _generate(llm, GuidedSpec.choice(options), 10, temperature=1.0)
    assert all(o.text in options for o in outs), [o.text for o in outs]


def test_gbnf_grammar_holds(llm):
    grammar = 'root ::= "(" digit ("," digit)? ("," digit)? ")"\ndigit ::= [0-9]'
    for out in _generate(llm, GuidedSpec("grammar", grammar), 5, temperature=1.0):
        assert re.fullmatch(r"\(\d(,\d){0,2}\)", out.text), out.text


def test_logit_bias_bans_and_forces(llm):
    prompt = [[1, 100, 200, 300]]
    greedy = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0].token_ids
    banned = llm.generate(
        prompt,
        SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logit_bias=((greedy[0], -100.0),)),
    )[0].token_ids
    assert greedy[0] not in banned
    forced = llm.generate(
        prompt,
        SamplingParams(temperature=1.0, seed=3, max_tokens=6, ignore_eos=True, logit_bias={4242: 100.0}),
    )[0].token_ids
    assert forced == [4242] * 6


def test_refusals(llm):
    with pytest.raises(InvalidParameterError, match="not supported"):
        llm.generate(
            [[1, 2, 3]], SamplingParams(guided=GuidedSpec.json_schema({"type": "object", "not": {}}))
        )
    with pytest.raises(InvalidParameterError, match="cannot compile"):
        llm.generate([[1, 2, 3]], SamplingParams(guided=GuidedSpec("regex", "(ab")))
    with pytest.raises(InvalidParameterError, match="no token of the model's vocabulary can start"):
        llm.generate([[1, 2, 3]], SamplingParams(guided=GuidedSpec("regex", "\U0004a0cb")))


def test_a_grammar_no_token_can_continue_stops_the_request(llm):
    """tests/server/test_fuzz.py found a regex (rare characters this tokenizer spells only in
    pieces the grammar cannot take) whose second token had no allowed token: the step sampled
    outside the grammar and failed (a 500). Now the request stops on a stop token there."""
    rx = "\u00da\U0004a0cb\b\u00e6u3"
    (out,) = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=20, guided=GuidedSpec("regex", rx)))
    assert out.finish_reason == "stop" and out.text == "\u00da"
    with pytest.raises(InvalidParameterError, match="vocabulary"):
        llm.generate([[1, 2, 3]], SamplingParams(logit_bias={10**6: 1.0}))
    with pytest.raises(InvalidParameterError, match="logit_bias"):
        SamplingParams(logit_bias={5: 101.0})
    with pytest.raises(InvalidParameterError, match="min_tokens"):
        SamplingParams(min_tokens=2, guided=GuidedSpec("json_object"))
