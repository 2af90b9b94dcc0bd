"""transformers 4.x's merge rebuild for a sentencepiece GGUF vocabulary in linear time
(kvspill/gguf/merge_rebuild.py): the same tokenizer, the patch in place only while open."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gguf
import pytest
from tiny_gguf import write_tiny_gguf
from transformers import AutoTokenizer
from transformers.integrations import ggml

from kvspill.gguf import cache as gguf_cache
from kvspill.gguf.merge_rebuild import IndexedTokens, linear_merge_rebuild

PROSE = """The cache keeps a running sequence's keys and values in tiers: hot blocks on the GPU,
pinned host memory, then disk. Attention is computed where the data lives, exactly, or on the
blocks that matter most. Prefill runs in chunks so that memory stays bounded at any context."""
TEXTS = ["The cache keeps values", " leading space and\ttabs\n", "ünïcödé ✓", "Attention in chunks!"]


def _spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A sentencepiece-style vocabulary: control tokens, byte fallbacks, single characters, then
    substrings of PROSE's words by frequency (most of them split into two other pieces)."""
    counts: dict[str, int] = {}
    for word in re.findall(r"[a-z]+", PROSE.lower()):
        piece = "\u2581" + word
        for i in range(len(piece)):
            for j in range(i + 2, min(len(piece), i + 6) + 1):
                counts[piece[i:j]] = counts.get(piece[i:j], 0) + 1
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    singles = ["\u2581", *"abcdefghijklmnopqrstuvwxyz"]
    pieces = singles + sorted((p for p in counts if p not in singles), key=lambda p: (-counts[p], p))
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(pieces))]
    return tokens + pieces, scores, types + [1] * len(pieces)


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory) -> Path:
    """A one-layer llama GGUF whose tokenizer is a sentencepiece vocabulary without merges."""
    tokens, scores, types = _spm_vocab()

    def add_tokenizer(w: gguf.GGUFWriter) -> int:
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        return len(tokens)

    return write_tiny_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf", add_tokenizer=add_tokenizer)


def test_indexed_tokens_is_the_list_with_a_set_behind_in() -> None:
    tokens = IndexedTokens(["a", "\u2581b", "a"])
    assert tokens == ["a", "\u2581b", "a"] and isinstance(tokens, list)
    assert tokens[1] == "\u2581b" and list(tokens) == ["a", "\u2581b", "a"] and len(tokens) == 3
    assert "\u2581b" in tokens and "b" not in tokens and 3 not in tokens


def test_the_constructor_sees_indexed_tokens_only_while_open_and_only_without_merges(monkeypatch) -> None:
    seen: list[type] = []

    class Skeleton:  # transformers 4.x's GGUFTokenizerSkeleton, as far as the patch touches it
        def __init__(self, dict_):
            seen.append(type(dict_["tokens"]))

    monkeypatch.setattr(ggml, "GGUFTokenizerSkeleton", Skeleton, raising=False)
    original = Skeleton.__init__
    with linear_merge_rebuild():
        Skeleton({"tokens": ["a", "b"], "scores": [0.0, 0.0]})
        Skeleton({"tokens": ["a", "b"], "merges": ["a b"]})
    Skeleton({"tokens": ["a", "b"], "scores": [0.0, 0.0]})
    assert seen == [IndexedTokens, list, list]
    assert Skeleton.__init__ is original


def test_a_sentencepiece_gguf_converts_to_the_same_tokenizer(spm_gguf) -> None:
    """transformers' conversion with the linear rebuild and without it (on transformers 5 the
    rebuild is its own and the patch does nothing; on 4.x this compares the two rebuilds)."""
    directory, name = str(spm_gguf.parent), spm_gguf.name
    plain = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    with linear_merge_rebuild():
        fast = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    assert json.loads(fast.backend_tokenizer.to_str()) == json.loads(plain.backend_tokenizer.to_str())
    merges = json.loads(plain.backend_tokenizer.to_str())["model"]["merges"]
    assert len(merges) > 100  # the vocabulary's pieces do split into pieces: merges were rebuilt
    for text in TEXTS:
        assert fast.encode(text) == plain.encode(text)


def test_kvspills_tokenizer_of_a_sentencepiece_gguf_is_transformers(monkeypatch, tmp_path, spm_gguf) -> None:
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(tmp_path / "cache"))
    ours = gguf_cache.gguf_tokenizer(spm_gguf)
    theirs = AutoTokenizer.from_pretrained(str(spm_gguf.parent), gguf_file=spm_gguf.name)
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text)
        assert ours.decode(ours.encode(text), skip_special_tokens=True) == theirs.decode(
            theirs.encode(text), skip_special_tokens=True
        )
