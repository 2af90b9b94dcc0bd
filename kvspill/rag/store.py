"""The persistent cache: SQLite holding content hash -> vector, indexed files and their chunks.

Tables:
- `embeddings(model, text_hash, vector, created)`: one vector per (model, sha256 of the text
  the model read). Any text embedded through any route lands here, so the same chunk in two
  files, or a chunk that comes back after an edit, is embedded once.
- `files(repo, path, content_hash, num_chunks)`: what each indexed directory held last time.
- `chunks(chunk_id, repo, path, start_line, end_line, text, text_hash)`: the search corpus.
- `chunks_fts(terms)`: FTS5 over the same chunks (rowid = chunk_id), each chunk's identifier
  terms (`lexical.py`) for the full-text half of hybrid search; `meta` records which version of
  those terms the table holds (an older one is rebuilt at open).

Invariants:
- WAL journal: readers never wait for the writer. A write takes `self._write_lock` (one writer in
  this process), then the flock on `<db>.lock` (one writer across processes: the CLI beside a
  server, `writer_lock.py`), then runs in one `BEGIN IMMEDIATE` transaction.
- Every public method runs through `_run`: "database is locked" (a writer that ignores our lock,
  e.g. the sqlite3 shell) is retried with a short backoff up to `busy_timeout_s`, then
  `StoreBusyError` (HTTP 503). Any other SQLite error drops the thread's connection (never left
  inside a transaction), and a corruption error checks the file and moves it aside when it is
  damaged: that call fails, the next one works on a fresh database (`db_check.py`).
- At open the file is checked (`PRAGMA quick_check`) under the writer lock; a damaged or
  truncated database is moved aside with one warning and an empty one is created, so a server
  always starts. Everything in it can be recomputed.
- One connection per thread (sqlite3 connections are not shared across threads); a connection
  opened before a move-aside is replaced on its thread's next call (`_epoch`).
- `generation(repo)` grows on every change to a repo's chunks: search indexes rebuild on it.
- `chunks_fts` holds exactly the rows of `chunks`: both change in the same transaction.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, Literal, ParamSpec, TypeVar

import numpy as np

from kvspill.rag.db_check import check_database, is_corruption, move_aside
from kvspill.rag.errors import StoreBusyError
from kvspill.rag.lexical import FTS_TOKENIZER, TERMS_VERSION, chunk_terms
from kvspill.rag.types import Chunk
from kvspill.rag.writer_lock import WriterLock

_SCHEMA = f"""
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
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(terms, tokenize="{FTS_TOKENIZER}");
"""
BUSY_TIMEOUT_S = 30.0
# SQLite's own busy wait per attempt (at most a quarter of the busy timeout): `_run` retries past
# it, which also covers the SQLITE_BUSY answers SQLite gives without waiting (a snapshot gone
# stale, WAL recovery by another connection).
CONNECT_TIMEOUT_S = 1.0
OpenCheck = Literal["quick", "full", "none"]
logger = logging.getLogger("kvspill.rag")
_P = ParamSpec("_P")
_R = TypeVar("_R")


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


def _is_busy(e: sqlite3.Error) -> bool:
    name = getattr(e, "sqlite_errorname", None) or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(e)


def _guarded(
    method: Callable[Concatenate[EmbeddingStore, _P], _R],
) -> Callable[Concatenate[EmbeddingStore, _P], _R]:
    """Run `method` through `EmbeddingStore._run` (retries on a locked database, recovery)."""

    def run(self: EmbeddingStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self._run(lambda: method(self, *args, **kwargs))

    functools.update_wrapper(run, method)  # its name and docstring (wraps' type hides the signature)
    return run


class EmbeddingStore:
    """The SQLite file at `path` (created with its directory if missing). `check`: how the file
    is checked at open ("full": integrity_check, for `kvspill rag repair`)."""

    def __init__(
        self, path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S, check: OpenCheck = "quick"
    ) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._file_lock = WriterLock(path)
        self._epoch = 0  # grows when the file is moved aside: older connections are replaced
        self.problem: str | None = None  # what was wrong with the file found at open
        self.moved_aside: Path | None = None  # where that file went
        if check != "none" and path.exists():
            with self._writing():  # no writer mid-transaction while the file is read or renamed
                self.problem = check_database(path, full=check == "full")
                if self.problem is not None:
                    self.moved_aside = move_aside(path, self.problem)
        self._create_schema()

    @_guarded
    def _create_schema(self) -> None:
        with self._writing():
            self._db().executescript(_SCHEMA)  # idempotent; executescript commits on its own
        self._sync_terms()

    def _sync_terms(self) -> None:
        """Fill `chunks_fts` anew when it holds another version of the terms (or none: a
        database written before hybrid search), in one transaction."""
        version_query = "SELECT value FROM meta WHERE key = 'terms_version'"
        if self._db().execute(version_query).fetchone() == (str(TERMS_VERSION),):
            return  # the usual case: no write lock taken
        with self._write() as db:
            if db.execute(version_query).fetchone() == (str(TERMS_VERSION),):
                return  # another process filled it meanwhile
            db.execute("DELETE FROM chunks_fts")
            rows = db.execute("SELECT chunk_id, path, text FROM chunks")
            db.executemany(
                "INSERT INTO chunks_fts (rowid, terms) VALUES (?, ?)",
                ((chunk_id, chunk_terms(path, text)) for chunk_id, path, text in rows),
            )
            db.execute("INSERT OR REPLACE INTO meta VALUES ('terms_version', ?)", [str(TERMS_VERSION)])

    def _db(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "db", None) is not None and local.epoch != self._epoch:
            self._drop_connection()
        db = getattr(local, "db", None)
        if db is None:
            timeout = min(self.busy_timeout_s / 4, CONNECT_TIMEOUT_S)
            db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across crashes of the process
            except sqlite3.Error:
                db.close()
                raise
            local.db, local.epoch = db, self._epoch
        return db

    def _drop_connection(self) -> None:
        """Close this thread's connection (a fresh one opens on the next call)."""
        db = getattr(self._local, "db", None)
        self._local.db = None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def close(self) -> None:
        """Close this thread's connection and the lock file (other threads' close with them)."""
        self._drop_connection()
        self._file_lock.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """This process's write lock, then the cross-process one, each waited for at most the
        busy timeout (then StoreBusyError)."""
        if not self._write_lock.acquire(timeout=self.busy_timeout_s):
            raise StoreBusyError(
                f"the RAG database stayed busy with other writes for {self.busy_timeout_s:g} s: retry later"
            )
        try:
            with self._file_lock.held(self.busy_timeout_s):
                yield
        finally:
            self._write_lock.release()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._writing():
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                    db.execute("ROLLBACK")
                if db.in_transaction:
                    self._drop_connection()
                raise

    def _run(self, fn: Callable[[], _R]) -> _R:
        """`fn()`, retried while the database is locked; see the module's invariants."""
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.01
        while True:
            try:
                return fn()
            except sqlite3.Error as e:
                if not _is_busy(e):
                    self._after_error(e)
                    raise
                if time.monotonic() + delay > deadline:
                    self._drop_connection()
                    raise StoreBusyError(
                        f"the RAG database stayed locked for {self.busy_timeout_s:g} s ({e}): retry later"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def _after_error(self, e: sqlite3.Error) -> None:
        """Drop the thread's connection; if `e` says the file is damaged, check it and move it
        aside (this call still fails; the next one finds a fresh database)."""
        self._drop_connection()
        if not is_corruption(e):
            return
        try:
            with self._writing():
                problem = check_database(self.path) if self.path.exists() else None
                if problem is None:
                    return  # another thread or process moved it aside, or it was transient
                self.problem, self.moved_aside = problem, move_aside(self.path, problem)
                self._epoch += 1
                self._db().executescript(_SCHEMA)
        except Exception:  # the caller's error is the one to report; this is logged
            logger.exception("the RAG database %s could not be checked after an error", self.path)

    # embeddings

    @_guarded
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

    @_guarded
    def put_vectors(self, model: str, items: Sequence[tuple[bytes, np.ndarray]], now: float) -> None:
        rows = [(model, key, np.ascontiguousarray(vec, np.float32).tobytes(), now) for key, vec in items]
        with self._write() as db:
            db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)", rows)

    # files and chunks

    @_guarded
    def file_hashes(self, repo: str) -> dict[str, bytes]:
        rows = self._db().execute("SELECT path, content_hash FROM files WHERE repo = ?", [repo])
        return {path: bytes(h) for path, h in rows}

    @_guarded
    def replace_files(self, repo: str, model: str, updates: list[FileUpdate], removed: list[str]) -> None:
        """Swap the chunks of the changed files and drop the removed ones, in one transaction."""
        with self._write() as db:
            owner = db.execute("SELECT model FROM repos WHERE repo = ?", [repo]).fetchone()
            if owner is not None and owner[0] != model:
                # Vectors of another model are not comparable with this one's: start over.
                db.execute(
                    "DELETE FROM chunks_fts WHERE rowid IN (SELECT chunk_id FROM chunks WHERE repo = ?)",
                    [repo],
                )
                db.execute("DELETE FROM chunks WHERE repo = ?", [repo])
                db.execute("DELETE FROM files WHERE repo = ?", [repo])
            for path in [*removed, *(u.path for u in updates)]:
                db.execute(
                    "DELETE FROM chunks_fts WHERE rowid IN "
                    "(SELECT chunk_id FROM chunks WHERE repo = ? AND path = ?)",
                    [repo, path],
                )
                db.execute("DELETE FROM chunks WHERE repo = ? AND path = ?", [repo, path])
                db.execute("DELETE FROM files WHERE repo = ? AND path = ?", [repo, path])
            for u in updates:
                for c, h in zip(u.chunks, u.text_hashes, strict=True):
                    chunk_id = db.execute(
                        "INSERT INTO chunks (repo, path, start_line, end_line, text, text_hash) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        [repo, u.path, c.start_line, c.end_line, c.text, h],
                    ).lastrowid
                    db.execute(
                        "INSERT INTO chunks_fts (rowid, terms) VALUES (?, ?)",
                        [chunk_id, chunk_terms(u.path, c.text)],
                    )
                db.execute(
                    "INSERT INTO files VALUES (?, ?, ?, ?)", [repo, u.path, u.content_hash, len(u.chunks)]
                )
            db.execute(
                "INSERT INTO repos VALUES (?, ?, 1) ON CONFLICT (repo) DO UPDATE "
                "SET generation = generation + 1, model = excluded.model",
                [repo, model],
            )

    @_guarded
    def num_chunks(self, repo: str) -> int:
        (count,) = self._db().execute("SELECT COUNT(*) FROM chunks WHERE repo = ?", [repo]).fetchone()
        return int(count)

    @_guarded
    def generation(self, repo: str) -> int:
        row = self._db().execute("SELECT generation FROM repos WHERE repo = ?", [repo]).fetchone()
        return int(row[0]) if row else 0

    @_guarded
    def repo_model(self, repo: str) -> str | None:
        row = self._db().execute("SELECT model FROM repos WHERE repo = ?", [repo]).fetchone()
        return str(row[0]) if row else None

    @_guarded
    def repos(self, model: str) -> list[str]:
        rows = self._db().execute("SELECT repo FROM repos WHERE model = ? ORDER BY repo", [model])
        return [r[0] for r in rows]

    @_guarded
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

    @_guarded
    def lexical_search(self, repos: Sequence[str], match: str, limit: int) -> list[tuple[int, str]]:
        """(chunk id, repo) of the chunks of `repos` whose terms match the FTS5 expression
        `match`, best bm25 first (bm25's term statistics are the whole table's)."""
        if not repos:
            return []
        marks = ",".join("?" * len(repos))
        rows = self._db().execute(
            "SELECT f.rowid, c.repo FROM chunks_fts f JOIN chunks c ON c.chunk_id = f.rowid "
            f"WHERE f.terms MATCH ? AND c.repo IN ({marks}) ORDER BY f.rank LIMIT ?",
            [match, *repos, limit],
        )
        return [(int(chunk_id), str(repo)) for chunk_id, repo in rows]

    @_guarded
    def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        rows = self._db().execute(
            f"SELECT chunk_id, path, start_line, end_line, text FROM chunks WHERE chunk_id IN ({marks})",
            [int(i) for i in chunk_ids],
        )
        return {r[0]: StoredChunk(*r) for r in rows}

    @_guarded
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
