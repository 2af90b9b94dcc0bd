"""Top-k search over one repo's chunk vectors: exact (NumPy) below a size, ANN (usearch) above.

Invariants:
- Scores are cosine similarities (vectors are unit length, so a dot product).
- Exact search is one matrix-vector product and an argpartition: at 384 dimensions it reads
  1.5 KB a chunk, so 20,000 chunks is a 30 MB scan (a few ms); past `ann_threshold` chunks an
  HNSW graph (usearch, cosine metric) answers instead, with `expansion_search` >= 4k candidates.
- Rows are in chunk id order (`scores_of` finds a chunk's row by binary search).
- An index is built from a snapshot of the store and is immutable; `IndexCache` rebuilds one
  when the store's generation for its repo moves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DEFAULT_ANN_THRESHOLD = 20_000


@dataclass(frozen=True)
class VectorIndex:
    chunk_ids: np.ndarray  # [num_chunks] int64
    vectors: np.ndarray  # [num_chunks, dim] float32
    ann: object | None  # usearch.index.Index over the same rows (keys = row numbers), or None

    @property
    def kind(self) -> str:
        return "usearch-hnsw" if self.ann is not None else "exact"

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(chunk_id, score) of the k nearest chunks to `query` [dim], best first."""
        n = len(self.chunk_ids)
        k = min(k, n)
        if k == 0:
            return []
        if self.ann is None:
            scores = self.vectors @ query
            top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(int(self.chunk_ids[i]), float(scores[i])) for i in top]
        matches = self.ann.search(query, k, exact=False)  # type: ignore[attr-defined]
        rows = np.asarray(matches.keys, dtype=np.int64)
        # Score with the stored vectors: usearch's distances are 1 - cos in float32, near enough,
        # but the exact product keeps scores identical to the exact path.
        scores = self.vectors[rows] @ query
        order = np.argsort(-scores, kind="stable")
        return [(int(self.chunk_ids[rows[i]]), float(scores[i])) for i in order]

    def scores_of(self, chunk_ids: list[int], query: np.ndarray) -> dict[int, float]:
        """Cosine of `query` [dim] with each of `chunk_ids` this index holds (a chunk added after
        it was built is left out). Rows are in chunk id order (`EmbeddingStore.repo_vectors`)."""
        wanted = np.asarray(chunk_ids, dtype=np.int64)
        rows = np.minimum(np.searchsorted(self.chunk_ids, wanted), max(len(self.chunk_ids) - 1, 0))
        held = (self.chunk_ids[rows] == wanted) if len(self.chunk_ids) else np.zeros(len(wanted), bool)
        scores = self.vectors[rows[held]] @ query
        return {int(c): float(s) for c, s in zip(wanted[held], scores, strict=True)}


def build_index(chunk_ids: np.ndarray, vectors: np.ndarray, ann_threshold: int) -> VectorIndex:
    if len(chunk_ids) < ann_threshold:
        return VectorIndex(chunk_ids, vectors, None)
    from usearch.index import Index

    ann = Index(ndim=vectors.shape[1], metric="cos", dtype="f32", expansion_search=256)
    ann.add(np.arange(len(chunk_ids), dtype=np.int64), vectors)
    return VectorIndex(chunk_ids, vectors, ann)


class IndexCache:
    """One `VectorIndex` per repo, rebuilt when `generation(repo)` changes."""

    def __init__(
        self,
        load: Callable[[str], tuple[np.ndarray, np.ndarray]],
        generation: Callable[[str], int],
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
    ) -> None:
        self._load = load
        self._generation = generation
        self.ann_threshold = ann_threshold
        self._indexes: dict[str, tuple[int, VectorIndex]] = {}
        self._lock = threading.Lock()  # one build at a time; searches of built indexes don't wait

    def get(self, repo: str) -> VectorIndex:
        generation = self._generation(repo)
        cached = self._indexes.get(repo)
        if cached is not None and cached[0] == generation:
            return cached[1]
        with self._lock:
            cached = self._indexes.get(repo)
            if cached is not None and cached[0] == generation:
                return cached[1]
            chunk_ids, vectors = self._load(repo)
            index = build_index(chunk_ids, vectors, self.ann_threshold)
            self._indexes[repo] = (generation, index)
            return index

    def kinds(self) -> dict[str, str]:
        return {repo: index.kind for repo, (_, index) in self._indexes.items()}
