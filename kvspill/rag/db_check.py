"""The database file's health: is it a sound SQLite database, and moving a broken one aside.

The RAG database holds only what can be recomputed (vectors of texts, chunks of files on disk),
so a corrupt or truncated file is not worth a server that cannot start: it is renamed aside, kept
for whoever wants to look at it, and a fresh one takes its place (issue 48, item 9).

Invariants:
- `check_database` never creates, writes or renames anything: it opens an existing file
  read-write only so that SQLite may read its WAL, and runs `PRAGMA quick_check` (or
  `integrity_check` with `full`).
- Only SQLite's corruption codes (SQLITE_CORRUPT, SQLITE_NOTADB) count as a broken database; a
  locked or busy database is not broken.
- `move_aside` renames, never deletes: the WAL, shared-memory and journal files first, the
  database last, so that no opener meanwhile pairs the new database with the old WAL. Callers
  hold the writer lock (`writer_lock.py`) and have closed their own connections.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from pathlib import Path

logger = logging.getLogger("kvspill.rag")

CORRUPTION_CODES = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})
SIDE_SUFFIXES = ("-journal", "-wal", "-shm")  # SQLite's files beside the database (not our lock)


def is_corruption(e: BaseException) -> bool:
    """Whether `e` says the database file is damaged (not merely locked or busy)."""
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    name = getattr(e, "sqlite_errorname", None) or ""
    if name:
        return any(name == code or name.startswith(code + "_") for code in CORRUPTION_CODES)
    message = str(e)  # an error raised without a code (none of sqlite3's own do)
    return "malformed" in message or "not a database" in message


def check_database(path: Path, full: bool = False) -> str | None:
    """None when `path` is a sound database, else what is wrong. FileNotFoundError when missing."""
    if not path.exists():
        raise FileNotFoundError(path)
    pragma = "integrity_check" if full else "quick_check"
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5.0)
    except sqlite3.DatabaseError as e:
        return f"cannot be opened: {e}"
    try:
        rows = db.execute(f"PRAGMA {pragma}(20)").fetchall()
    except sqlite3.DatabaseError as e:
        if not is_corruption(e):
            raise
        return str(e)
    finally:
        db.close()
    problems = [str(r[0]) for r in rows if r[0] != "ok"]
    return "; ".join(problems[:5]) or None


def move_aside(path: Path, reason: str) -> Path:
    """Rename the database and its side files to `<db>.corrupt-<UTC time>` (+ suffix); log it once."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = Path(f"{path}.corrupt-{stamp}")
    number = 1
    while any(Path(f"{target}{s}").exists() for s in ("", *SIDE_SUFFIXES)):
        number += 1
        target = Path(f"{path}.corrupt-{stamp}-{number}")
    for suffix in (*SIDE_SUFFIXES, ""):  # the database last: see the module's invariants
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").rename(f"{target}{suffix}")
    logger.warning(
        "the RAG database %s is damaged (%s): moved it aside to %s and started an empty one "
        "(embeddings are recomputed on the next index)",
        path,
        reason,
        target,
    )
    return target
