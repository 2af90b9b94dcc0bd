"""Reciprocal rank fusion (RRF) of ranked lists: how hybrid search joins the dense and full-text rankings.

score(chunk) = sum over the lists that hold it of 1 / (RRF_K + rank), rank 1-based.

Why ranks and not the scores themselves: cosine similarities (-1..1) and bm25 values (unbounded,
depending on the corpus' term statistics) have no common scale, and a weighted sum of them needs a
weight tuned per corpus; ranks need none (Cormack, Clarke and Buettcher, SIGIR 2009).

Invariants:
- RRF_K = 60, the paper's value (and Elasticsearch's and OpenSearch's default): with it, rank 1
  of one list alone (1/61) is worth less than rank 5 of both (2/65), so agreement wins.
- Each list is cut to its first CANDIDATES items before fusion; a chunk found in neither cut is
  not a candidate.
- Ties keep the order of first appearance (the first list's best first): fusion is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60
# How deep each list is read. Past rank 100 one list adds under 1/160 to a chunk's score, less
# than a single move of rank near the top: deeper lists change almost nothing and cost a scan.
CANDIDATES = 100


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[int]], k: int = RRF_K, depth: int = CANDIDATES
) -> list[tuple[int, float]]:
    """(item, fused score) of every item in the first `depth` of any ranking, best first."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking[:depth], start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    order = sorted(enumerate(fused.items()), key=lambda entry: (-entry[1][1], entry[0]))
    return [item_score for _, item_score in order]
