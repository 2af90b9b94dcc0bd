"""The synthetic tasks: deterministic by seed, the answers in the prompt, fitted to the length;
the scorer; the teacher-forced comparison (pure Python, no model)."""

from __future__ import annotations

import math

import pytest

from kvspill.eval.runner import compare_logprobs, hot_kv_kwargs, reference_kwargs
from kvspill.eval.tasks import TASKS, make_samples, score, stdlib_sources, teacher_forced_text
from kvspill.types import TokenLogprobs


def count(text: str) -> int:
    """A stand-in tokenizer: about 4 characters a token, like BPE on English and code."""
    return -(-len(text) // 4)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_samples_are_deterministic_fit_and_hold_their_answers(task):
    samples = make_samples(task, 2048, 3, seed=7, count_tokens=count)
    again = make_samples(task, 2048, 3, seed=7, count_tokens=count)
    assert samples == again
    other_seed = make_samples(task, 2048, 3, seed=8, count_tokens=count)
    assert [s.prompt for s in other_seed] != [s.prompt for s in samples]
    assert len({s.prompt for s in samples}) == 3  # the samples differ from each other
    for s in samples:
        assert s.answers and all(a in s.prompt for a in s.answers)
        budget = 2048 - s.max_tokens
        assert 0.8 * budget < s.num_prompt_tokens == count(s.prompt) <= budget


def test_longer_lengths_give_longer_prompts_and_too_short_is_an_error():
    short = make_samples("passkey", 1024, 1, 0, count)[0]
    long = make_samples("passkey", 8192, 1, 0, count)[0]
    assert 7 * short.num_prompt_tokens < long.num_prompt_tokens
    with pytest.raises(ValueError, match="too few"):
        make_samples("common_words", 100, 1, 0, count)


def test_a_draw_with_nothing_to_ask_is_drawn_again(monkeypatch):
    """A code-task draw can hold no function to ask for (8K, Python 3.12's stdlib): that sample
    is drawn again from another random stream instead of failing the length."""

    def sometimes_empty(rng, units):
        asks = rng.random() < 0.3
        return "abcd" * units, (("abcd",) if asks else ())

    monkeypatch.setitem(TASKS, "sometimes", (sometimes_empty, 8))
    samples = make_samples("sometimes", 1024, 6, 0, count)
    assert [s.index for s in samples] == list(range(6)) and all(s.answers for s in samples)
    assert samples == make_samples("sometimes", 1024, 6, 0, count)  # deterministic
    monkeypatch.setitem(TASKS, "never", (lambda rng, units: ("abcd" * units, ()), 8))
    with pytest.raises(ValueError, match="too few"):
        make_samples("never", 1024, 1, 0, count)


def test_code_task_asks_for_a_definition_from_real_stdlib_files():
    sample = make_samples("code", 4096, 1, 0, count)[0]
    (answer,) = sample.answers
    assert answer.startswith("def ") and sample.prompt.count(answer + ":") == 1
    assert sample.prompt.count("# ===== file: ") >= 1
    assert len(stdlib_sources()) > 100


def test_score_is_the_fraction_of_answers_found():
    assert score("The pass key is 12345.", ("12345",)) == 1.0
    assert score("the pass key is 1234", ("12345",)) == 0.0
    assert score("ABCDE, fghij and  KLMNO", ("abcde", "FGHIJ", "klmno", "PQRST")) == 0.75
    assert score("def  foo(a,  b)", ("def foo(a, b)",)) == 1.0  # whitespace normalized


def test_teacher_forced_text_is_real_source_of_the_length():
    text = teacher_forced_text(3000, seed=1, count_tokens=count)
    assert 2900 < count(text) <= 3000
    assert "def " in text and text == teacher_forced_text(3000, seed=1, count_tokens=count)


def _lp(token: int, top: list[tuple[int, float]]) -> TokenLogprobs:
    return TokenLogprobs(token, dict(top).get(token, -20.0), top)


def test_compare_logprobs_top1_and_kl():
    a = [(1, math.log(0.7)), (2, math.log(0.2)), (3, math.log(0.1))]
    b = [(2, math.log(0.5)), (1, math.log(0.4)), (3, math.log(0.1))]
    same = compare_logprobs([None, _lp(1, a), _lp(2, a)], [None, _lp(1, a), _lp(2, a)])
    assert same["num_tokens"] == 2 and same["top1_agreement"] == 100.0 and same["mean_kl"] < 1e-12
    diff = compare_logprobs([None, _lp(1, b), _lp(2, a)], [None, _lp(1, a), _lp(2, a)])
    want_kl = 0.7 * math.log(0.7 / 0.4) + 0.2 * math.log(0.2 / 0.5)  # token 3 agrees: no term
    assert diff["top1_agreement"] == 50.0
    assert diff["mean_kl"] == pytest.approx(want_kl / 2, rel=1e-9)


def test_reference_drops_what_approximates_attention_and_hot_kv_sizes():
    test = {
        "dtype": "float32",
        "cold_attention": "cpu",
        "sparse_budget_tokens": 512,
        **hot_kv_kwargs(256, 8192),
    }
    assert reference_kwargs(test) == {"dtype": "float32", "max_num_batched_tokens": 256}
    sizes = hot_kv_kwargs(256, 8192, block_size=16)
    assert sizes["num_kv_blocks"] == 1 + 32 + 2 and sizes["num_cpu_kv_blocks"] == 512 + 2
