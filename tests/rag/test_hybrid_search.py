"""Hybrid search: identifier terms, the FTS5 table kept beside the chunks, reciprocal rank fusion
on a tiny index (fake embedder), the dense path unchanged, and `kvspill rag index` re-indexing an
unchanged directory without loading the model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli import rag_cmd
from kvspill.errors import InvalidParameterError
from kvspill.rag.fusion import RRF_K, reciprocal_rank_fusion
from kvspill.rag.lexical import identifier_terms, match_expression, terms
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore

from .conftest import FakeEmbedder, write_repo

FILES = {
    "snake.py": "def raise_for_status(self):\n    if self.status_code >= 400:\n        raise HTTPError(self)\n",
    "camel.js": "function raiseForStatus(response) {\n  return response.ok;\n}\n",
    "other.py": "def parse_header(line):\n    return line.split(':')\n",
    "words.md": "The status of the release is for everyone to see.\n",
}


@pytest.mark.parametrize(
    ("identifier", "expected"),
    [
        ("raise_for_status", ["raise_for_status", "raise", "for", "status"]),
        ("raiseForStatus", ["raiseforstatus", "raise_for_status", "raise", "for", "status"]),
        ("HTTPConnection", ["httpconnection", "http_connection", "http", "connection"]),
        ("parseURL", ["parseurl", "parse_url", "parse", "url"]),
        ("__init__", ["__init__", "init"]),
        ("utf8_decode", ["utf8_decode", "utf8", "decode"]),
        ("ÉtatNaïf", ["étatnaïf", "état_naïf", "état", "naïf"]),
    ],
)
def test_identifiers_split_on_underscore_and_case(identifier: str, expected: list[str]) -> None:
    assert identifier_terms(identifier) == expected


def test_dots_separate_identifiers_and_queries_quote_their_terms() -> None:
    assert terms("json.decoder.JSONDecodeError") == [
        "json",
        "decoder",
        "jsondecodeerror",
        "json_decode_error",
        "json",
        "decode",
        "error",
    ]
    assert match_expression('r.raise_for_status() OR "x"') == (
        '"r" OR "raise_for_status" OR "raise" OR "for" OR "status" OR "or" OR "x"'
    )
    assert match_expression("() ... 42") is None


@pytest.fixture
def service(fake_service: RagService) -> RagService:
    write_repo(fake_service.allowed_root / "repo", FILES)
    fake_service.precache_repo("repo")
    return fake_service


def _lexical_paths(service: RagService, query: str) -> list[str]:
    match = match_expression(query)
    assert match is not None
    found = service.store.lexical_search([str(service.allowed_root / "repo")], match, 10)
    chunks = service.store.chunks_by_id([c for c, _ in found])
    return [chunks[c].path for c, _ in found]


def test_full_text_finds_both_spellings_by_their_whole_and_their_parts(service: RagService) -> None:
    # the whole identifier is rarer than its parts: both definitions outrank the prose
    assert set(_lexical_paths(service, "raise_for_status")[:2]) == {"snake.py", "camel.js"}
    assert set(_lexical_paths(service, "raiseForStatus")[:2]) == {"snake.py", "camel.js"}
    assert set(_lexical_paths(service, "status")) == {"snake.py", "camel.js", "words.md"}
    assert _lexical_paths(service, "parse_header") == ["other.py"]


def test_hybrid_ranks_by_reciprocal_rank_fusion_and_keeps_the_cosine(service: RagService) -> None:
    query = "raise_for_status"
    dense = service.search(query, top_k=4, mode="dense")
    assert [h.fused_score for h in dense] == [None] * 4
    assert [h.score for h in dense] == sorted((h.score for h in dense), reverse=True)
    dense_rank = {h.path: rank for rank, h in enumerate(dense, start=1)}
    lexical_rank = {path: rank for rank, path in enumerate(_lexical_paths(service, query), start=1)}

    def rrf(path: str) -> float:
        ranks = [r for r in (dense_rank.get(path), lexical_rank.get(path)) if r is not None]
        return sum(1 / (RRF_K + r) for r in ranks)

    hybrid = service.search(query, top_k=4)
    assert [h.path for h in hybrid] == sorted(dense_rank, key=lambda p: (-rrf(p), dense_rank[p]))
    assert [h.fused_score for h in hybrid] == pytest.approx([rrf(h.path) for h in hybrid])
    cosine = {h.path: h.score for h in dense}
    assert all(h.score == pytest.approx(cosine[h.path]) for h in hybrid)
    with pytest.raises(InvalidParameterError, match="hybrid, dense"):
        service.search(query, mode="bm25")


def test_fusion_rewards_agreement_and_breaks_ties_by_first_appearance() -> None:
    fused = reciprocal_rank_fusion([[1, 2, 3], [3, 4]])
    assert [item for item, _ in fused] == [3, 1, 2, 4]  # 2 and 4 tie at 1/62: 2 came first
    assert fused[0][1] == pytest.approx(1 / 63 + 1 / 61)
    # past `depth` a list adds nothing: 3 is not a candidate
    assert [item for item, _ in reciprocal_rank_fusion([[1, 2, 3], [4, 3]], depth=1)] == [1, 4]


def test_a_database_from_before_hybrid_search_gets_its_full_text_table_at_open(
    service: RagService, tmp_path: Path
) -> None:
    service.store.close()
    db = sqlite3.connect(service.store.path)
    db.executescript("DROP TABLE chunks_fts; DELETE FROM meta;")
    db.close()
    reopened = RagService(FakeEmbedder(), EmbeddingStore(service.store.path), service.allowed_root)
    assert set(_lexical_paths(reopened, "raiseForStatus")[:2]) == {"snake.py", "camel.js"}


def test_a_file_changed_or_removed_leaves_no_full_text_rows_behind(service: RagService) -> None:
    repo = service.allowed_root / "repo"
    (repo / "camel.js").unlink()
    (repo / "snake.py").write_text("x = 1\n")
    service.precache_repo("repo", allow_removal=True)
    db = sqlite3.connect(service.store.path)
    assert (
        db.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()
        == db.execute("SELECT COUNT(*) FROM chunks").fetchone()
        == (3,)
    )
    assert "raise" not in " ".join(_lexical_paths(service, "status"))
    assert _lexical_paths(service, "status") == ["words.md"]


def _app() -> typer.Typer:
    app = typer.Typer()
    rag_cmd.register(app)
    return app


def test_rag_index_of_an_unchanged_directory_never_loads_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = tmp_path / "my-embedder"  # served as "my-embedder": the fake's name below
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    fake = FakeEmbedder()
    fake.name = "my-embedder"
    monkeypatch.setattr("kvspill.rag.model.load_embedder", lambda *args: fake)
    repo = write_repo(tmp_path / "repo", FILES)
    args = ["rag", "index", str(repo), "--rag-db", str(tmp_path / "rag.sqlite3"), "--embedding-model"]
    first = CliRunner().invoke(_app(), [*args, str(model_dir)])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout.splitlines()[-1])["num_chunks_embedded"] == 4

    def no_model(*args: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("kvspill.rag.model.load_embedder", no_model)
    again = CliRunner().invoke(_app(), [*args, str(model_dir)])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout.splitlines()[-1])["num_files_unchanged"] == 4
    (repo / "other.py").write_text("def changed():\n    pass\n")  # now a chunk must be embedded
    changed = CliRunner().invoke(_app(), [*args, str(model_dir)])
    assert changed.exit_code != 0 and isinstance(changed.exception, AssertionError)
