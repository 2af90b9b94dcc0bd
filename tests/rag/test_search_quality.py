"""Search over kvspill's own source: the file defining a named function is in the top 3 for at
least 8 of the 10 queries in search_queries.json (committed before the first run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import kvspill
from kvspill.rag.files import FileFilter
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore

QUERIES = json.loads((Path(__file__).parent / "search_queries.json").read_text())
PACKAGE_DIR = Path(kvspill.__file__).parent


@pytest.mark.slow
def test_named_functions_are_found_in_the_top_3(embedder: Any, tmp_path: Path) -> None:
    service = RagService(embedder, EmbeddingStore(tmp_path / "rag.sqlite3"), PACKAGE_DIR.parent)
    report = service.precache_repo(PACKAGE_DIR.name, FileFilter(include=tuple(QUERIES["indexed"])))
    assert report.num_files >= 20
    assert {s.reason for s in report.skipped} <= {"empty"}  # empty __init__.py files
    found = []
    for case in QUERIES["queries"]:
        top = [hit.path for hit in service.search(case["query"], top_k=3)]
        found.append(case["expected"] in top)
        print(f"{'ok  ' if found[-1] else 'MISS'} {case['expected']:<24} top 3: {top}")
    assert sum(found) >= 8, f"{sum(found)} of {len(found)} found in the top 3"
