"""vLLM's allowed_token_ids and bad_words (kvspill.sampling.token_bans) through the sampler:
greedy and random rows only ever draw allowed tokens; a bad word's last token is banned exactly
where the output ends with the rest of it. CPU, crafted logits."""

from __future__ import annotations

import pytest
import torch

from kvspill.errors import InvalidParameterError
from kvspill.sampling.sampler import Sampler, SamplingState
from kvspill.sampling.token_bans import apply_token_bans, bad_word_sequences, banned_tokens
from kvspill.sampling_params import SamplingParams

VOCAB = 32


def _state(output: list[int] | None = None, **kw) -> SamplingState:
    return SamplingState(SamplingParams(**kw), [1, 2], list(output or []))


def test_allowed_token_ids_limit_greedy_and_random_rows():
    logits = torch.arange(VOCAB, dtype=torch.float32).repeat(3, 1)  # the best token is VOCAB - 1
    states = [
        _state(temperature=0, allowed_token_ids=[3, 5]),
        _state(temperature=1.0, seed=7, allowed_token_ids=[3, 5]),
        _state(temperature=0),  # no ban: untouched in the same batch
    ]
    draws = {5: 0, 3: 0}
    for _ in range(200):
        out = Sampler(torch.Generator().manual_seed(0)).sample(logits, states)
        assert out.token_ids[0] == 5 and out.token_ids[2] == VOCAB - 1
        draws[out.token_ids[1]] += 1
    assert draws[5] > draws[3] > 0  # both allowed tokens are drawn, by their probabilities


def test_bad_words_ban_the_last_token_only_after_the_rest():
    params = SamplingParams(bad_words_token_ids=[(9,), (4, 6), (4, 6, 8)])
    assert banned_tokens(params, []) == [9]  # a one-token word always; longer ones need their prefix
    assert banned_tokens(params, [1, 4]) == [9, 6]
    assert banned_tokens(params, [4, 6]) == [9, 8]
    assert banned_tokens(params, [6, 4]) == [9, 6]
    logits = torch.zeros(2, VOCAB)
    logits[:, 6] = 5.0
    states = [
        _state([1, 4], temperature=0, bad_words_token_ids=[(4, 6)]),
        _state([1, 3], temperature=0, bad_words_token_ids=[(4, 6)]),
    ]
    out = Sampler().sample(logits, states)
    assert out.token_ids[0] != 6 and out.token_ids[1] == 6
    before = logits.clone()
    apply_token_bans(logits, [s.params for s in states], [s.output_token_ids for s in states])
    assert torch.equal(logits, before)  # the input is never modified


def test_bad_word_sequences_take_the_word_bare_and_after_a_space():
    vocab = {"cat": 1, " cat": 2, "black": 3, " black": 4}

    def encode(text: str) -> list[int]:
        ids, rest = [], text
        while rest:
            piece = next(p for p in sorted(vocab, key=len, reverse=True) if rest.startswith(p))
            ids.append(vocab[piece])
            rest = rest[len(piece) :]
        return ids

    assert bad_word_sequences(["cat", "  black cat"], encode) == ((1,), (2,), (3, 2), (4, 2))
    assert bad_word_sequences(["cat", "cat"], encode) == ((1,), (2,))  # no repeats


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [-1]}, "allowed_token_ids"),
        ({"bad_words": ["  "]}, "bad_words"),
        ({"bad_words_token_ids": [()]}, "bad_words"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ],
)
def test_bad_values_name_their_field(kw, param):
    with pytest.raises(InvalidParameterError) as e:
        SamplingParams(**kw)
    assert e.value.param == param


def test_bans_leave_the_plain_greedy_fast_path():
    assert _state(temperature=0).plain_greedy
    assert not _state(temperature=0, allowed_token_ids=[1]).plain_greedy
    assert not _state(temperature=0, bad_words_token_ids=[(1,)]).plain_greedy
