"""`LazyEmbedder`: an `Embedder` whose model loads on first use.

Why: `kvspill rag index` on an unchanged directory embeds nothing, yet loading the model (torch,
transformers, the weights) took 47.6 s of such a re-index on the 2-core machine (issue 53); the
service needs only the model's name (the cache's key) to find unchanged files, and the name is
known without loading (`model_dir.resolve_model_dir`).

Invariants: `name` never loads; `dim`, `max_seq_length`, `vocab_size` and every encode load the
model once (under a lock: two threads never load it twice). Torch-free itself: `load` does that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from kvspill.rag.types import Embedder


class LazyEmbedder:
    """The `Embedder` that `load()` returns, called on the first use that needs the model."""

    def __init__(self, name: str, load: Callable[[], Embedder]) -> None:
        self._name = name
        self._load = load
        self._model: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _get(self) -> Embedder:
        with self._lock:
            if self._model is None:
                model = self._load()
                if model.name != self._name:  # the cache would file its vectors under another key
                    raise ValueError(f"the model loaded as {model.name!r}, expected {self._name!r}")
                self._model = model
            return self._model

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._get().dim

    @property
    def max_seq_length(self) -> int:
        return self._get().max_seq_length

    @property
    def vocab_size(self) -> int:
        return self._get().vocab_size

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._get().encode(texts)

    def encode_ids(self, token_ids: list[list[int]]) -> np.ndarray:
        return self._get().encode_ids(token_ids)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self._get().count_tokens(texts)
