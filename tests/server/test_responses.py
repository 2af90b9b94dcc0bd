"""Response bodies. A model without a tokenizer (the random-weight benchmark shapes) answers token ids: every
output token reaches the client as `token_ids` in its stream chunk and in the full body, as vLLM
does with --skip-tokenizer-init; with a tokenizer the fields are absent. The OpenAPI document
lists the 400s the server sends for invalid requests."""

from __future__ import annotations

import json

from kvspill.sampling_params import SamplingParams
from kvspill.server.responses import Job, chunk, full_body
from kvspill.types import RequestOutput


def _out(delta: list[int], all_ids: list[int], finished: bool = False) -> RequestOutput:
    return RequestOutput(
        req_id="r",
        prompt=None,
        prompt_token_ids=[5, 6, 7],
        token_ids=all_ids,
        delta_token_ids=delta,
        finished=finished,
        finish_reason="length" if finished else None,
    )


def _event(sse: str) -> dict:
    assert sse.startswith("data: ")
    return json.loads(sse[len("data: ") :])


def test_streamed_chunks_carry_the_token_ids_when_there_is_no_tokenizer():
    job = Job(False, "random:llama-1b", [[5, 6, 7]], SamplingParams(detokenize=False), True, True, None)
    choice = job.choices[0]
    first = chunk(job, choice, _out([42], [42]))
    assert first is not None, "a token without text is still a chunk"
    body = _event(first)
    assert body["choices"][0]["token_ids"] == [42] and body["choices"][0]["text"] == ""
    last = _event(chunk(job, choice, _out([43], [42, 43], finished=True)))
    assert last["choices"][0]["token_ids"] == [43] and last["choices"][0]["finish_reason"] == "length"
    choice.final = _out([], [42, 43], finished=True)
    full = full_body(job)
    assert full["choices"][0]["token_ids"] == [42, 43]
    assert full["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_no_token_ids_field_when_the_model_has_a_tokenizer():
    job = Job(False, "m", ["hi"], SamplingParams(), True, False, tokenizer=object())
    choice = job.choices[0]
    assert chunk(job, choice, _out([42], [42])) is None  # no text yet (held by the detokenizer)
    out = _out([43], [42, 43], finished=True)
    out.delta_text = "ab"
    assert "token_ids" not in _event(chunk(job, choice, out))["choices"][0]


def test_the_openapi_document_lists_400_for_invalid_requests_not_422():
    from kvspill.server.app import ServerSettings, create_app

    schema = create_app(lambda: None, ServerSettings(model_name="m")).openapi()
    codes = {code for path in schema["paths"].values() for op in path.values() for code in op["responses"]}
    assert "422" not in codes
    assert "400" in schema["paths"]["/v1/completions"]["post"]["responses"]
