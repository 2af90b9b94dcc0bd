"""The persistent cache: SQLite holding content hash -> vector, indexed files and their chunks.

Tables:
- `embeddings(model, text_hash, vector, created)`: one vector per (model, sha256 of the text
  the model read). Any text embedded through any route lands here, so the same chunk in two
  files, or a chunk that comes back after an edit, is embedded once.
- `files(repo, path, content_hash, num_chunks)`: what each indexed directory held last time.
- `chunks(chunk_id, repo, path, start_line, end_line, text, text_hash)`: the search corpus.

Invariants:
- WAL journal: readers never wait for the writer. Writes take `self._write_lock` (one writer in
  this process) and run in `BEGIN IMMEDIATE` transactions (one writer across processes, e.g. the
  CLI beside a server; others wait up to `busy_timeout`).
- One connection per thread (sqlite3 connections are not shared across threads).
- `generation(repo)` grows on every change to a repo's chunks: search indexes rebuild on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvspill.rag.types import Chunk

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL, text_hash BLOB NOT NULL, vector BLOB NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (model, text_hash)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS files (
    repo TEXT NOT NULL, path TEXT NOT NULL, content_hash BLOB NOT NULL, num_chunks INTEGER NOT NULL,
    PRIMARY KEY (repo, path)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id INTEGER PRIMARY KEY, repo TEXT NOT NULL, path TEXT NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, text TEXT NOT NULL, text_hash BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_file ON chunks (repo, path);
CREATE TABLE IF NOT EXISTS repos (
    repo TEXT PRIMARY KEY, model TEXT NOT NULL, generation INTEGER NOT NULL) WITHOUT ROWID;
"""
BUSY_TIMEOUT_S = 30.0


def text_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def content_hash(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


@dataclass(frozen=True)
class StoredChunk:
    chunk_id: int
    path: str
    start_line: int
    end_line: int
    text: str


@dataclass(frozen=True)
class FileUpdate:
    """A file's new content: its chunks and the hash of each chunk's embedded text."""

    path: str
    content_hash: bytes
    chunks: list[Chunk]
    text_hashes: list[bytes]


class EmbeddingStore:
    """The SQLite file at `path` (created with its directory if missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._write_lock = threading.Lock()
        with self._write_lock:
            self._db().executescript(_SCHEMA)  # idempotent; executescript commits on its own

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across crashes of the process
            self._local.db = db
        return db

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # embeddings

    def get_vectors(self, model: str, hashes: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors among `hashes`."""
        found: dict[bytes, np.ndarray] = {}
        db = self._db()
        unique = list(dict.fromkeys(hashes))
        for start in range(0, len(unique), 500):  # SQLite's bound-parameter limit
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = db.execute(
                f"SELECT text_hash, vector FROM embeddings WHERE model = ? AND text_hash IN ({marks})",
                [model, *part],
            ).fetchall()
            for key, blob in rows:
                found[bytes(key)] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_vectors(self, model: str, items: Sequence[tuple[bytes, np.ndarray]], now: float) -> None:
        rows = [(model, key, np.ascontiguousarray(vec, np.float32).tobytes(), now) for key, vec in items]
        with self._write() as db:
            db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)", rows)

    # files and chunks

    def file_hashes(self, repo: str) -> dict[str, bytes]:
        rows = self._db().execute("SELECT path, content_hash FROM files WHERE repo = ?", [repo])
        return {path: bytes(h) for path, h in rows}

    def replace_files(self, repo: str, model: str, updates: list[FileUpdate], removed: list[str]) -> None:
        """Swap the chunks of the changed files and drop the removed ones, in one transaction."""
        with self._write() as db:
            owner = db.execute("SELECT model FROM repos WHERE repo = ?", [repo]).fetchone()
            if owner is not None and owner[0] != model:
                # Vectors of another model are not comparable with this one's: start over.
                db.execute("DELETE FROM chunks WHERE repo = ?", [repo])
                db.execute("DELETE FROM files WHERE repo = ?", [repo])
            for path in [*removed, *(u.path for u in updates)]:
                db.execute("DELETE FROM chunks WHERE repo = ? AND path = ?", [repo, path])
                db.execute("DELETE FROM files WHERE repo = ? AND path = ?", [repo, path])
            for u in updates:
                db.executemany(
                    "INSERT INTO chunks (repo, path, start_line, end_line, text, text_hash) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (repo, u.path, c.start_line, c.end_line, c.text, h)
                        for c, h in zip(u.chunks, u.text_hashes, strict=True)
                    ],
                )
                db.execute(
                    "INSERT INTO files VALUES (?, ?, ?, ?)", [repo, u.path, u.content_hash, len(u.chunks)]
                )
            db.execute(
                "INSERT INTO repos VALUES (?, ?, 1) ON CONFLICT (repo) DO UPDATE "
                "SET generation = generation + 1, model = excluded.model",
                [repo, model],
            )

    def num_chunks(self, repo: str) -> int:
        (count,) = self._db().execute("SELECT COUNT(*) FROM chunks WHERE repo = ?", [repo]).fetchone()
        return int(count)

    def generation(self, repo: str) -> int:
        row = self._db().execute("SELECT generation FROM repos WHERE repo = ?", [repo]).fetchone()
        return int(row[0]) if row else 0

    def repo_model(self, repo: str) -> str | None:
        row = self._db().execute("SELECT model FROM repos WHERE repo = ?", [repo]).fetchone()
        return str(row[0]) if row else None

    def repos(self, model: str) -> list[str]:
        rows = self._db().execute("SELECT repo FROM repos WHERE model = ? ORDER BY repo", [model])
        return [r[0] for r in rows]

    def repo_vectors(self, repo: str, model: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk_ids [n] int64, vectors [n, dim] float32) of a repo's chunks."""
        rows = (
            self._db()
            .execute(
                "SELECT c.chunk_id, e.vector FROM chunks c JOIN embeddings e "
                "ON e.model = ? AND e.text_hash = c.text_hash WHERE c.repo = ? ORDER BY c.chunk_id",
                [model, repo],
            )
            .fetchall()
        )
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim)
        return ids, vectors

    def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        rows = self._db().execute(
            f"SELECT chunk_id, path, start_line, end_line, text FROM chunks WHERE chunk_id IN ({marks})",
            [int(i) for i in chunk_ids],
        )
        return {r[0]: StoredChunk(*r) for r in rows}

    def counts(self, repos: Sequence[str]) -> dict[str, int]:
        """Entries and bytes of the embedding cache; files and chunks of `repos`."""
        db = self._db()
        entries, vector_bytes = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(vector)), 0) FROM embeddings"
        ).fetchone()
        num_chunks = num_files = 0
        for repo in repos:
            num_chunks += db.execute("SELECT COUNT(*) FROM chunks WHERE repo = ?", [repo]).fetchone()[0]
            num_files += db.execute("SELECT COUNT(*) FROM files WHERE repo = ?", [repo]).fetchone()[0]
        return {
            "entries": int(entries),
            "vector_bytes": int(vector_bytes),
            "file_bytes": self._file_bytes(),
            "chunks": int(num_chunks),
            "files": int(num_files),
        }

    def _file_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += Path(str(self.path) + suffix).stat().st_size
        return total
