"""bad_words and allowed_token_ids through the engine on the tiny Llama, with and without async
scheduling: a two-token bad word is never completed even when the step that could complete it
was launched before its first token was read back (the runner waits for it, as for penalties)."""

from __future__ import annotations

from kvspill.engine.core import LLMEngine
from kvspill.sampling_params import SamplingParams

BASE = dict(device="cpu", dtype="float32", block_size=8, max_model_len=128, max_num_batched_tokens=32)
PROMPT = [5, 17, 33, 9, 12, 40]


def _run(model_dir, async_scheduling: bool, params: SamplingParams) -> list[int]:
    engine = LLMEngine(model=str(model_dir), **BASE, async_scheduling=async_scheduling)
    engine.add_request(PROMPT, params, req_id="r")
    finals = [o for step in engine.run() for o in step.outputs if o.finished]
    return list(finals[0].token_ids)


def _pairs(ids: list[int]) -> set[tuple[int, int]]:
    return set(zip(ids, ids[1:], strict=False))


def test_a_bad_word_is_never_completed(tiny_llama_dir):
    plain = _run(tiny_llama_dir, False, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    word = (plain[3], plain[4])
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, bad_words_token_ids=[word])
    banned = {mode: _run(tiny_llama_dir, mode, params) for mode in (False, True)}
    assert banned[False] == banned[True]  # the async step waited for the token it compares
    assert banned[False] != plain and word not in _pairs(banned[False]) and len(banned[False]) == 16
    allowed = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, allowed_token_ids=[7, 8])
    assert set(_run(tiny_llama_dir, True, allowed)) <= {7, 8}
