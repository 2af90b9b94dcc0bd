"""Tests for kvspill.sampling.sampler: greedy, truncation, temperature, penalties, min_tokens,
logprobs and seeded reproducibility across batch compositions. CPU, crafted logits, < 2 s."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from kvspill.sampling.sampler import (
    Sampler,
    SamplingState,
    apply_min_tokens,
    apply_penalties,
)
from kvspill.sampling_params import SamplingParams

VOCAB = 64


def state(prompt: list[int] | None = None, output: list[int] | None = None, eos=(), **kw) -> SamplingState:
    return SamplingState(SamplingParams(**kw), prompt or [], list(output or []), eos_token_ids=tuple(eos))


def sampler(seed: int = 0) -> Sampler:
    return Sampler(torch.Generator().manual_seed(seed))


def draw_support(logits_row: torch.Tensor, num_draws: int = 2000, **kw) -> set[int]:
    """Token ids sampled from one row of logits over `num_draws` rows of one batch."""
    logits = logits_row.unsqueeze(0).expand(num_draws, -1).contiguous()  # [num_draws, vocab]
    out = sampler(1).sample(logits, [state(**kw) for _ in range(num_draws)])
    return set(out.token_ids)


def logits_from_probs(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float32).log()  # [vocab]


def test_greedy_is_argmax_with_ties_to_lowest_id() -> None:
    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(0))
    logits[3, 10] = logits[3, 20] = logits[3].max() + 1.0
    out = sampler().sample(logits, [state(temperature=0.0) for _ in range(8)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()
    assert out.token_ids[3] == 10
    assert out.logprobs == [None] * 8


def test_greedy_rows_in_mixed_batch_are_argmax() -> None:
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(1))
    states = [state(temperature=0.0), state(temperature=1.0), state(temperature=0.0, logprobs=2), state()]
    out = sampler().sample(logits, states)
    assert out.token_ids[0] == int(logits[0].argmax())
    assert out.token_ids[2] == int(logits[2].argmax())


@pytest.mark.parametrize("temperature", [0.05, 0.7, 1.0, 3.0, 50.0])
def test_top_k_1_equals_greedy(temperature: float) -> None:
    logits = torch.randn(16, VOCAB, generator=torch.Generator().manual_seed(2))
    logits[5, 7] = logits[5, 40] = logits[5].max() + 0.5  # tie: top-k keeps the lower id, as argmax
    out = sampler().sample(logits, [state(temperature=temperature, top_k=1) for _ in range(16)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()


def test_top_k_support() -> None:
    row = torch.tensor([0.0, 3.0, 1.0, 2.9, 2.8, -1.0, 2.0, 0.5])
    assert draw_support(row, top_k=3) == {1, 3, 4}
    assert draw_support(row, top_k=-1) == set(range(8))


def test_top_p_support() -> None:
    row = logits_from_probs([0.1, 0.4, 0.2, 0.3])
    assert draw_support(row, top_p=0.65) == {1, 3}  # 0.4 + 0.3 reaches 0.65
    assert draw_support(row, top_p=0.75) == {1, 3, 2}
    assert draw_support(row, top_p=0.3) == {1}


def test_top_k_then_top_p_renormalizes() -> None:
    # top-k=3 keeps [.4, .3, .2] -> [.444, .333, .222]; top-p .75 then drops the .222 token.
    row = logits_from_probs([0.1, 0.4, 0.2, 0.3])
    assert draw_support(row, top_p=0.75) == {1, 2, 3}
    assert draw_support(row, top_k=3, top_p=0.75) == {1, 3}


def test_min_p_support() -> None:
    row = logits_from_probs([0.5, 0.3, 0.12, 0.08])
    assert draw_support(row, min_p=0.2) == {0, 1, 2}  # threshold 0.1
    assert draw_support(row, min_p=0.5) == {0, 1}  # threshold 0.25


def test_min_p_applies_after_temperature() -> None:
    # T=0.5 squares the probabilities: [.25, .09, .0144, .0064]/.3608; min_p .2 keeps only 0 and 1.
    row = logits_from_probs([0.5, 0.3, 0.12, 0.08])
    assert draw_support(row, temperature=0.5, min_p=0.2) == {0, 1}


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_scales_probabilities(temperature: float) -> None:
    probs = torch.tensor([0.6, 0.3, 0.1])
    num_draws = 40_000
    logits = probs.log().unsqueeze(0).expand(num_draws, -1).contiguous()  # [num_draws, 3]
    out = sampler(123).sample(logits, [state(temperature=temperature) for _ in range(num_draws)])
    freq = torch.bincount(torch.tensor(out.token_ids), minlength=3).double() / num_draws
    expected = probs.double() ** (1.0 / temperature)
    expected /= expected.sum()
    # Standard error <= 0.0025 at 40k draws; 0.015 is 6 sigma.
    assert torch.allclose(freq, expected, atol=0.015), (freq, expected)


def test_repetition_penalty_matches_hf() -> None:
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(3))
    logits[0, 5], logits[0, 6] = 2.0, -2.0
    prompts = [[5, 6, 1, 1], [9, 10], [2]]
    outputs = [[6, 7], [], [3, 3, 63]]
    penalties = [1.3, 0.7, 2.0]
    states = [state(p, o, repetition_penalty=r) for p, o, r in zip(prompts, outputs, penalties, strict=True)]
    got = apply_penalties(logits, states)
    for i in range(3):
        ids = torch.tensor([prompts[i] + outputs[i]])
        want = RepetitionPenaltyLogitsProcessor(penalties[i])(ids, logits[i : i + 1].clone())
        assert torch.equal(got[i], want[0])
    assert got[0, 5] == pytest.approx(2.0 / 1.3) and got[0, 6] == pytest.approx(-2.0 * 1.3)
    changed = (got != logits).nonzero().tolist()
    seen = [sorted(set(p + o)) for p, o in zip(prompts, outputs, strict=True)]
    assert changed == [[i, t] for i in range(3) for t in seen[i] if logits[i, t] != 0.0]


def test_frequency_and_presence_penalties_hand_computed() -> None:
    logits = torch.zeros(2, 8)
    logits[0] = torch.arange(8, dtype=torch.float32)
    states = [
        # prompt tokens do not count for OpenAI penalties
        state([4, 4], [1, 1, 1, 2], frequency_penalty=0.5, presence_penalty=0.25),
        state([], [], temperature=0.0),  # untouched row
    ]
    got = apply_penalties(logits, states)
    want = logits.clone()
    want[0, 1] = 1.0 - 3 * 0.5 - 0.25
    want[0, 2] = 2.0 - 1 * 0.5 - 0.25
    assert torch.allclose(got, want)
    assert torch.equal(got[1], logits[1])


def test_all_penalties_combined_order() -> None:
    logits = torch.tensor([[1.0, -1.0, 2.0, 0.5]])
    s = state([0], [1, 2, 2], repetition_penalty=2.0, frequency_penalty=0.1, presence_penalty=0.2)
    got = apply_penalties(logits, [s])
    want = torch.tensor([[1.0 / 2, -1.0 * 2 - 0.1 - 0.2, 2.0 / 2 - 0.2 - 0.2, 0.5]])
    assert torch.allclose(got, want)


def test_no_penalties_returns_input_unchanged() -> None:
    logits = torch.randn(2, VOCAB)
    assert apply_penalties(logits, [state(), state(temperature=0.0)]) is logits


def test_min_tokens_suppresses_eos_and_stop_token_ids() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, 2], logits[0, 9], logits[0, 4] = 10.0, 9.0, 8.0  # eos 2, stop token 9
    kw = dict(temperature=0.0, min_tokens=3, stop_token_ids=(9,))
    early = state([1], [5, 5], eos=[2], **kw)
    done = state([1], [5, 5, 5], eos=[2], **kw)
    out = sampler().sample(logits.expand(2, -1).contiguous(), [early, done])
    assert out.token_ids == [4, 2]
    masked = apply_min_tokens(logits, [early])
    assert masked[0, 2] == -math.inf and masked[0, 9] == -math.inf
    assert torch.equal(masked[0, [0, 1, 3, 4]], logits[0, [0, 1, 3, 4]])
    # ignore_eos: eos is not a stop, so it is not suppressed (vLLM); stop_token_ids still are.
    ignoring = state([1], [], eos=[2], ignore_eos=True, **kw)
    assert sampler().sample(logits, [ignoring]).token_ids == [2]


def test_min_tokens_for_random_rows() -> None:
    row = logits_from_probs([0.9, 0.05, 0.05])
    assert 0 not in draw_support(row, eos=[0], min_tokens=1)


def test_logprobs_sampled_and_top_sorted() -> None:
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(4))
    states = [state(temperature=0.0, logprobs=5), state(temperature=0.8, logprobs=0, seed=1), state()]
    out = sampler().sample(logits, states)
    ref = logits.log_softmax(dim=-1)
    lp0 = out.logprobs[0]
    assert lp0 is not None and lp0.token_id == out.token_ids[0]
    assert lp0.logprob == pytest.approx(float(ref[0].max()), abs=1e-6)
    vals, ids = ref[0].topk(5)
    assert [t for t, _ in lp0.top] == ids.tolist()
    assert [v for _, v in lp0.top] == pytest.approx(vals.tolist(), abs=1e-6)
    assert [v for _, v in lp0.top] == sorted((v for _, v in lp0.top), reverse=True)
    # Before temperature: the sampled token's logprob is from the untempered distribution.
    lp1 = out.logprobs[1]
    assert lp1 is not None and lp1.top == []
    assert lp1.logprob == pytest.approx(float(ref[1, out.token_ids[1]]), abs=1e-6)
    assert out.logprobs[2] is None


def test_logprobs_see_penalties() -> None:
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(5))
    s = state([3], [4, 4], temperature=0.0, logprobs=3, repetition_penalty=1.5, frequency_penalty=0.3)
    out = sampler().sample(logits, [s])
    ref = apply_penalties(logits, [s]).log_softmax(dim=-1)
    lp = out.logprobs[0]
    assert lp is not None
    assert lp.logprob == pytest.approx(float(ref[0, out.token_ids[0]]), abs=1e-6)
    assert [t for t, _ in lp.top] == ref[0].topk(3).indices.tolist()


def test_input_logits_not_modified() -> None:
    logits = torch.randn(3, VOCAB)
    before = logits.clone()
    states = [
        state([1], [2], repetition_penalty=1.5, presence_penalty=1.0, top_k=5, top_p=0.5, min_p=0.1),
        state([1], [], eos=[2], min_tokens=2, logprobs=2),
        state(temperature=0.0),
    ]
    sampler().sample(logits, states)
    assert torch.equal(logits, before)


def run_steps(states: list[SamplingState], target: int, num_steps: int, seed: int = 0) -> list[int]:
    """Sample `num_steps` tokens for every state on per-step random logits; return states[target]'s."""
    gen = torch.Generator().manual_seed(seed)
    smp = Sampler(torch.Generator().manual_seed(seed + 1000))
    for _ in range(num_steps):
        base = torch.randn(VOCAB, generator=gen)  # the target's logits, same in every batch
        logits = torch.randn(len(states), VOCAB)  # other rows: arbitrary
        logits[target] = base
        out = smp.sample(logits, states)
        for s, t in zip(states, out.token_ids, strict=True):
            s.output_token_ids.append(t)
    return states[target].output_token_ids


SEEDED = dict(temperature=0.9, top_p=0.95, seed=1234, frequency_penalty=0.2)


def test_seeded_reproducible_alone_vs_mixed_batch() -> None:
    alone = run_steps([state([1, 2, 3], **SEEDED)], 0, 20)
    again = run_steps([state([1, 2, 3], **SEEDED)], 0, 20)
    assert alone == again
    mixed_batch = [
        state([7], temperature=0.0),
        state([8], temperature=1.3, seed=99, top_k=4),
        state([9]),  # unseeded: engine generator
        state([1, 2, 3], **SEEDED),
        state([5], temperature=0.5, logprobs=2, repetition_penalty=1.2, min_p=0.1),
    ]
    assert run_steps(mixed_batch, 3, 20) == alone
    other_seed = run_steps([state([1, 2, 3], **{**SEEDED, "seed": 4321})], 0, 20)
    assert other_seed != alone


def test_seeded_request_resumed_after_preemption_continues_identically() -> None:
    full = run_steps([state([1, 2, 3], **SEEDED)], 0, 12)
    first = run_steps([state([1, 2, 3], **SEEDED)], 0, 5)
    assert first == full[:5]
    # A fresh state holding the 5 earlier outputs (as the runner rebuilds it) replays their draws.
    resumed = state([1, 2, 3], first, **SEEDED)
    gen = torch.Generator().manual_seed(0)
    logits_per_step = [torch.randn(VOCAB, generator=gen) for _ in range(12)]
    smp = Sampler()
    for step in range(5, 12):
        out = smp.sample(logits_per_step[step].unsqueeze(0), [resumed])
        resumed.output_token_ids.append(out.token_ids[0])
    assert resumed.output_token_ids == full


def test_seeded_state_with_runner_generator_and_per_call_engine_generator() -> None:
    lazy = run_steps([state([1, 2, 3], **SEEDED)], 0, 8)
    given = SamplingState(SamplingParams(**SEEDED), [1, 2, 3], generator=torch.Generator().manual_seed(1234))
    assert run_steps([given], 0, 8) == lazy
    # The engine generator can be given per call; unseeded rows then follow it.
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(6))
    a = [Sampler().sample(logits, [state()], torch.Generator().manual_seed(7)).token_ids for _ in range(3)]
    b = [sampler(7).sample(logits, [state()]).token_ids for _ in range(3)]
    assert a == b


def test_widen_and_greedy_on_the_cpu_widens_then_takes_torchs_argmax():
    from kvspill.sampling.sampler import widen_and_greedy

    logits = torch.randn((3, 300), generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    logits[1, [4, 200]] = 30.0
    wide, ids = widen_and_greedy(logits)
    assert wide.dtype == torch.float32 and torch.equal(wide, logits.float())
    assert torch.equal(ids, logits.float().argmax(dim=-1)) and ids[1].item() == 4
