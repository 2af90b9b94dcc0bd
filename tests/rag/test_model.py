"""The transformers embedder against sentence-transformers' own encode of the same directory."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvspill.errors import ModelNotFoundError
from kvspill.rag.model_dir import PACKAGED_MODEL, packaged_model_dir, resolve_model_dir

SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "def merge_partials(o1, lse1, o2, lse2): return log-sum-exp merge",
    "Ünïcödé text, emoji 🙂 and CJK 漢字 mixed in.",
    "x",
    "A very long paragraph that goes past the model's 256 word pieces. " * 40,  # truncated by both
]


def test_matches_sentence_transformers(embedder: Any) -> None:
    st = pytest.importorskip(
        "sentence_transformers", reason="the reference: pip install sentence-transformers"
    )
    reference = st.SentenceTransformer(str(packaged_model_dir()), device="cpu", local_files_only=True)
    want = reference.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=False)
    got = embedder.encode(SENTENCES)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.999, cosine
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_token_ids_embed_like_their_text(embedder: Any) -> None:
    ids = embedder.tokenizer(SENTENCES, add_special_tokens=False)["input_ids"]
    batch = embedder.encode(SENTENCES)
    np.testing.assert_allclose(embedder.encode_ids(ids), batch, atol=1e-5)
    # a vector does not depend on its batch (length-sorted batches, padding masked)
    np.testing.assert_allclose(embedder.encode([SENTENCES[3]])[0], batch[3], atol=1e-5)
    assert embedder.count_tokens(["x", SENTENCES[-1]]) == [3, 256]


def test_model_names_resolve_offline(tmp_path: Any) -> None:
    assert resolve_model_dir(None)[1] == PACKAGED_MODEL
    assert resolve_model_dir(f"sentence-transformers/{PACKAGED_MODEL}")[0] == packaged_model_dir()
    assert resolve_model_dir(str(packaged_model_dir()))[0] == packaged_model_dir()
    with pytest.raises(ModelNotFoundError, match="not a sentence-transformers directory"):
        resolve_model_dir(str(tmp_path))
