"""Relevance of RAG search: recall@k of hybrid against dense-only search over real source trees.

    python -m kvspill.bench.rag_relevance [--queries FILE] [--rag-db FILE] [--top-k 5] [--out DIR]

Each tree of the queries file (`bench/results/2026-12-02-rag-relevance/queries.json`) is indexed
with the packaged all-MiniLM-L6-v2 (20-line chunks, as the service's default), then every query
runs in both modes; a query is found when one of its expected files is among the top-k hits.
Prints a markdown table (recall@k and mean reciprocal rank of the first expected file within the
top k, per tree and mode) and writes `results.json` (every query's hits in both modes) to --out.

The embedding cache (--rag-db) makes a second run cheap: only the first one embeds the trees
(about 1,600 chunks, minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvspill.rag.files import FileFilter
from kvspill.rag.service import SEARCH_MODES, RagService
from kvspill.rag.store import EmbeddingStore

DEFAULT_QUERIES = Path("bench/results/2026-12-02-rag-relevance/queries.json")
DEFAULT_DB = "~/.cache/kvspill/rag-relevance.sqlite3"


@dataclass(frozen=True)
class QueryResult:
    query: str
    expected: list[str]
    mode: str
    hits: list[str]  # paths of the top-k hits, best first
    rank: int | None  # 1-based rank of the first expected file among them

    @property
    def found(self) -> bool:
        return self.rank is not None


def tree_directory(spec: str) -> Path:
    """`{stdlib}`, `{package:NAME}` or a path, as a directory of this machine."""
    if spec == "{stdlib}":
        return Path(sysconfig.get_paths()["stdlib"])
    if spec.startswith("{package:") and spec.endswith("}"):
        found = importlib.util.find_spec(spec[len("{package:") : -1])
        if found is None or found.origin is None:
            raise SystemExit(f"{spec}: the package is not installed in this interpreter")
        return Path(found.origin).parent
    return Path(spec).expanduser()


def run_tree(service: RagService, tree: dict[str, Any], top_k: int) -> list[QueryResult]:
    """Every query of `tree` in every search mode (the service indexes only `tree`'s directory)."""
    results = []
    for case in tree["queries"]:
        for mode in SEARCH_MODES:
            hits = [h.path for h in service.search(case["query"], top_k, mode=mode)]
            rank = next((i for i, path in enumerate(hits, start=1) if path in case["expected"]), None)
            results.append(QueryResult(case["query"], case["expected"], mode, hits, rank))
    return results


def index_tree(embedder: Any, db_path: Path, tree: dict[str, Any]) -> tuple[RagService, dict[str, Any]]:
    directory = tree_directory(tree["directory"]).resolve()
    service = RagService(embedder, EmbeddingStore(db_path), directory)
    start = time.perf_counter()
    report = service.precache_repo(".", FileFilter(include=tuple(tree["include"])), allow_removal=True)
    seconds = time.perf_counter() - start
    print(
        f"{tree['name']}: {directory}, {report.num_files} files, {report.num_chunks} chunks "
        f"({report.num_chunks_embedded} embedded now, {seconds:.1f} s)"
    )
    return service, {"directory": str(directory), "files": report.num_files, "chunks": report.num_chunks}


def summary(results: list[QueryResult], mode: str) -> dict[str, float]:
    mine = [r for r in results if r.mode == mode]
    return {
        "queries": len(mine),
        "found": sum(r.found for r in mine),
        "recall": sum(r.found for r in mine) / len(mine),
        "mrr": sum(1 / r.rank for r in mine if r.rank is not None) / len(mine),
    }


def table(rows: list[dict[str, Any]], top_k: int) -> str:
    lines = [
        f"| tree | files | chunks | queries | recall@{top_k} dense | recall@{top_k} hybrid "
        f"| MRR@{top_k} dense | MRR@{top_k} hybrid |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        d, h = row["dense"], row["hybrid"]
        lines.append(
            f"| {row['name']} | {row['files']} | {row['chunks']} | {d['queries']} "
            f"| {d['found']}/{d['queries']} ({d['recall']:.2f}) | {h['found']}/{h['queries']} ({h['recall']:.2f}) "
            f"| {d['mrr']:.2f} | {h['mrr']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--rag-db", default=DEFAULT_DB, help="embedding cache (kept: a rerun embeds nothing)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from kvspill.rag.model import load_embedder

    embedder = load_embedder()
    db_path = Path(args.rag_db).expanduser()
    rows, details = [], []
    for tree in json.loads(args.queries.read_text())["trees"]:
        service, facts = index_tree(embedder, db_path, tree)
        results = run_tree(service, tree, args.top_k)
        for r in results:
            if r.mode == "hybrid":
                dense = next(d for d in results if d.mode == "dense" and d.query == r.query)
                print(f"  dense {dense.rank or '-'!s:>2}  hybrid {r.rank or '-'!s:>2}  {r.query}")
        rows.append({"name": tree["name"], **facts, **{m: summary(results, m) for m in SEARCH_MODES}})
        details.append({"name": tree["name"], "results": [r.__dict__ for r in results]})
    print(table(rows, args.top_k))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"top_k": args.top_k, "model": embedder.name, "trees": rows, "queries": details}
        (args.out / "results.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
