"""Tests for kvspill.text.detokenizer: streaming decode with SmolLM2's byte-level BPE tokenizer and a
neighbour-dependent toy tokenizer, and stop strings over text deltas."""

from __future__ import annotations

import random

import pytest

from kvspill.text.detokenizer import IncrementalDetokenizer, StopChecker

TEXTS = [
    "Héllo wörld, naïve café, Ærøskøbing, señor, Ωμέγα",
    "Emoji: 🎉🚀 family 👨‍👩‍👧 flag 🇯🇵 skin 👍🏽 math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "日本語のテキスト、中文句子。한국어 문장입니다.",
    'def f(x: int) -> int:\n    """Square."""\n    return x ** 2  # ✓\n\tprint(f"{x!r}")\n',
    "mixed: 価格は€42.50 (≈ ¥6,800) — done…",
]


@pytest.fixture(scope="module")
def tokenizer(smollm2_hf_tokenizer):
    """transformers' SmolLM2 tokenizer (skips where the embedded model is not installed)."""
    return smollm2_hf_tokenizer


def stream(detok: IncrementalDetokenizer, ids: list[int], chunk: int = 1) -> list[str]:
    return [detok.add(ids[i : i + chunk]) for i in range(0, len(ids), chunk)]


@pytest.mark.parametrize("text", TEXTS)
def test_one_token_at_a_time_matches_decode(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=True)
    deltas = stream(detok, ids)
    assert all("\ufffd" not in d for d in deltas), deltas
    assert "".join(deltas) == tokenizer.decode(ids) == text
    assert detok.text == text
    assert detok.flush() == ""
    # Every text has characters split across tokens, so holding back is exercised.
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)


def test_with_chat_prompt_and_special_tokens(tokenizer) -> None:
    prompt = tokenizer.encode("<|im_start|>user\nSay hi 👋<|im_end|>\n<|im_start|>assistant\n")
    out = tokenizer.encode("Hi there 👋! 你好", add_special_tokens=False) + [tokenizer.eos_token_id]
    for skip in (True, False):
        detok = IncrementalDetokenizer(tokenizer, prompt, skip_special_tokens=skip)
        deltas = stream(detok, out)
        assert all("\ufffd" not in d for d in deltas)
        assert "".join(deltas) == tokenizer.decode(out, skip_special_tokens=skip)
    assert detok.text.endswith("<|im_end|>")


@pytest.mark.parametrize("chunk", [2, 3, 7])
def test_several_tokens_per_add(tokenizer, chunk: int) -> None:
    ids = tokenizer.encode("".join(TEXTS), add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=True)
    deltas = stream(detok, ids, chunk)
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == tokenizer.decode(ids)


def test_incomplete_character_held_until_flush(tokenizer) -> None:
    ids = tokenizer.encode("ok 🎉", add_special_tokens=False)
    partial = ids[:-1]  # the emoji's last byte is missing
    assert tokenizer.decode(partial).endswith("\ufffd")
    detok = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=True)
    deltas = stream(detok, partial)
    assert "".join(deltas) == "ok"
    tail = detok.flush()
    assert "".join(deltas) + tail == tokenizer.decode(partial)
    assert detok.text == tokenizer.decode(partial)


class SentencePieceLike:
    """Toy tokenizer whose decode of a token depends on its neighbours: '▁' is a space, and
    a leading space of the decoded sequence is dropped (SentencePiece/Llama-2 behaviour)."""

    pieces = ["<s>", "▁Hello", "▁world", "!", "▁how", "▁are", "▁you", "?"]

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        pieces = [self.pieces[i] for i in token_ids if not (skip_special_tokens and i == 0)]
        text = "".join(pieces).replace("▁", " ")
        return text[1:] if text.startswith(" ") else text


def test_neighbour_dependent_decode_uses_offsets() -> None:
    tok = SentencePieceLike()
    out = [1, 2, 3, 4, 5, 6, 7]
    detok = IncrementalDetokenizer(tok, [], skip_special_tokens=True)
    assert "".join(stream(detok, out)) == "Hello world! how are you?"
    # Per-token decoding would have dropped every space; with the prompt as context the first
    # token keeps its leading space (the text continues the prompt).
    assert "".join(tok.decode([t]) for t in out) == "Helloworld!howareyou?"
    detok = IncrementalDetokenizer(tok, [0, 1], skip_special_tokens=True)
    assert "".join(stream(detok, [2, 3])) == " world!"


# ---- StopChecker ----


def run_stop(deltas: list[str], stop: tuple[str, ...], include: bool = False) -> tuple[list[str], str | None]:
    checker = StopChecker(stop, include)
    emitted: list[str] = []
    for d in deltas:
        text, matched = checker.add(d)
        emitted.append(text)
        if matched is not None:
            return emitted, matched
    emitted.append(checker.flush())
    return emitted, None


def test_stop_spanning_deltas_never_shown_partially() -> None:
    emitted, matched = run_stop(["Hello wo", "rld S", "T", "OP and more"], ("STOP",))
    assert matched == "STOP"
    assert "".join(emitted) == "Hello world "
    assert emitted[:3] == ["Hello wo", "rld ", ""]


def test_held_partial_released_when_ruled_out() -> None:
    checker = StopChecker(("STOP",), False)
    assert checker.add("abc ST") == ("abc ", None)
    assert checker.add("ART") == ("START", None)
    assert checker.add("S") == ("", None)
    assert checker.flush() == "S"
    assert checker.flush() == ""


def test_include_stop_str_in_output() -> None:
    emitted, matched = run_stop(["an", "swer: 42", "\n\n", "more"], ("\n\n",), include=True)
    assert matched == "\n\n"
    assert "".join(emitted) == "answer: 42\n\n"


def test_multiple_stop_strings_earliest_wins() -> None:
    emitted, matched = run_stop(["x END y STOP z"], ("STOP", "END"))
    assert (emitted, matched) == (["x "], "END")
    # Overlapping: "bc" ends before "abcd" does, however the text is split.
    for deltas in (["abcd"], ["a", "b", "c", "d"], ["ab", "cd"]):
        emitted, matched = run_stop(deltas, ("abcd", "bc"))
        assert ("".join(emitted), matched) == ("a", "bc")
    # Same end: the one starting first.
    assert run_stop(["xabc"], ("bc", "abc"))[1] == "abc"


def test_no_stop_strings_pass_through() -> None:
    assert run_stop(["a", "b"], ()) == (["a", "b", ""], None)


def test_after_match_nothing_more() -> None:
    checker = StopChecker(("!",), False)
    assert checker.add("hi! there") == ("hi", "!")
    assert checker.add("more") == ("", None)
    assert checker.flush() == ""


def reference_stop(text: str, stop: tuple[str, ...], include: bool) -> tuple[str, str | None]:
    """Non-streaming reference: cut at the stop occurrence ending first (ties: starting first)."""
    for end in range(1, len(text) + 1):
        hits = [s for s in stop if text[:end].endswith(s)]
        if hits:
            s = max(hits, key=len)
            return (text[:end] if include else text[: end - len(s)]), s
    return text, None


@pytest.mark.parametrize("include", [False, True])
def test_random_splits_match_reference(include: bool) -> None:
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 30)))
        stop = tuple({"".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(2)})
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(0, min(6, len(text) + 1))))
        deltas = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        emitted, matched = run_stop(deltas, stop, include)
        want_text, want_stop = reference_stop(text, stop, include)
        assert ("".join(emitted), matched) == (want_text, want_stop), (deltas, stop)
        # What was streamed is never retracted: every emitted prefix is a prefix of the result.
        assert want_text.startswith("".join(emitted))


def test_detokenizer_feeding_stop_checker(tokenizer) -> None:
    ids = tokenizer.encode("The answer is 42 🎉.\nEND of story", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=True)
    checker = StopChecker(("\nEND", "🎉!"), False)
    shown = ""
    for i in ids:
        text, matched = checker.add(detok.add([i]))
        assert "\ufffd" not in text and "\nE" not in text
        shown += text
        if matched:
            break
    assert (shown, matched) == ("The answer is 42 🎉.", "\nEND")
