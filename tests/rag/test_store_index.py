"""The SQLite store (persistence, concurrent writers) and the search index (exact vs usearch)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from kvspill.rag.index import IndexCache, build_index
from kvspill.rag.store import EmbeddingStore, FileUpdate, text_hash
from kvspill.rag.types import Chunk


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_vectors_survive_reopen_and_concurrent_writers(tmp_path: Path) -> None:
    path = tmp_path / "db" / "rag.sqlite3"
    store = EmbeddingStore(path)
    rng = np.random.default_rng(0)
    vectors = _unit(rng, 400, 16)
    keys = [text_hash(f"text {i}") for i in range(400)]

    def write(part: int) -> None:
        rows = range(part, 400, 4)
        for i in rows:  # one transaction per vector: many interleaved writers
            store.put_vectors("m", [(keys[i], vectors[i])], 0.0)

    threads = [threading.Thread(target=write, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reopened = EmbeddingStore(path)
    found = reopened.get_vectors("m", keys)
    assert len(found) == 400
    assert all(np.array_equal(found[k], vectors[i]) for i, k in enumerate(keys))
    assert reopened.get_vectors("other-model", keys) == {}
    assert reopened.counts([])["entries"] == 400


def test_replace_files_swaps_chunks_and_bumps_generation(tmp_path: Path) -> None:
    store = EmbeddingStore(tmp_path / "rag.sqlite3")
    a = FileUpdate("a.py", b"h1", [Chunk(1, 2, "a"), Chunk(2, 3, "b")], [b"ka", b"kb"])
    b = FileUpdate("b.py", b"h2", [Chunk(1, 1, "c")], [b"kc"])
    store.replace_files("/r", "m", [a, b], [])
    assert store.generation("/r") == 1 and store.num_chunks("/r") == 3
    store.replace_files("/r", "m", [FileUpdate("a.py", b"h3", [Chunk(1, 1, "z")], [b"kz"])], ["b.py"])
    assert store.generation("/r") == 2
    assert store.file_hashes("/r") == {"a.py": b"h3"}
    assert store.num_chunks("/r") == 1
    store.replace_files("/r", "other", [b], [])  # another model: the repo starts over
    assert store.file_hashes("/r") == {"b.py": b"h2"} and store.repo_model("/r") == "other"


@pytest.mark.parametrize("k", [1, 5, 50])
def test_exact_and_ann_agree(k: int) -> None:
    rng = np.random.default_rng(1)
    vectors = _unit(rng, 3000, 32)
    ids = np.arange(100, 3100, dtype=np.int64)
    exact = build_index(ids, vectors, ann_threshold=10**9)
    ann = build_index(ids, vectors, ann_threshold=1000)
    assert exact.kind == "exact" and ann.kind == "usearch-hnsw"
    recall = []
    for query in _unit(rng, 20, 32):
        want = exact.search(query, k)
        got = ann.search(query, k)
        assert [s for _, s in want] == sorted((s for _, s in want), reverse=True)
        scores = vectors @ query
        assert want[0][1] == pytest.approx(float(scores.max()), abs=1e-6)
        recall.append(len({i for i, _ in want} & {i for i, _ in got}) / k)
    assert np.mean(recall) >= 0.95


def test_index_cache_rebuilds_on_new_generation() -> None:
    generation = {"r": 1}
    loads = []

    def load(repo: str) -> tuple[np.ndarray, np.ndarray]:
        loads.append(repo)
        return np.array([7], dtype=np.int64), np.ones((1, 4), dtype=np.float32) / 2

    cache = IndexCache(load, generation.__getitem__)
    first = cache.get("r")
    assert cache.get("r") is first and loads == ["r"]
    generation["r"] = 2
    assert cache.get("r") is not first and loads == ["r", "r"]
    assert first.search(np.ones(4, dtype=np.float32) / 2, 3) == [(7, 1.0)]
