"""One writer at a time across processes: an exclusive `flock` on `<db>.lock`, beside the database.

Why a file of its own: SQLite's locks are POSIX record locks on the database file, which a
process drops when it closes any descriptor of that file (issue 48, item 9: an index that read
the database's folder let a concurrent `kvspill rag index` delete the live WAL). A flock on a
separate file that only this class opens cannot be dropped that way, and a CLI index beside a
server queues behind it instead of racing SQLite's busy handler.

Invariants:
- The lock is held for one write transaction (and for the check and move-aside at open), never
  longer: readers (WAL) never take it.
- flock locks belong to an open file description: two `WriterLock`s on one path (two stores in
  one process, or two processes) exclude each other; threads sharing one `WriterLock` must be
  serialised by the caller (the store's thread lock), since a second flock on the same
  description is a no-op.
- The kernel releases the lock when its holder dies (kill -9 included): no stale lock files.
- Waiting is bounded: past `timeout_s`, `StoreBusyError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from kvspill.rag.errors import StoreBusyError

LOCK_SUFFIX = ".lock"  # also in access.DB_SUFFIXES: the walk never opens it


class WriterLock:
    def __init__(self, db_path: Path) -> None:
        self.path = Path(f"{db_path}{LOCK_SUFFIX}")
        self._fd: int | None = None

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    @contextlib.contextmanager
    def held(self, timeout_s: float) -> Iterator[None]:
        """Hold the lock; wait for another holder at most `timeout_s` (then StoreBusyError)."""
        fd = self._descriptor()
        deadline = time.monotonic() + timeout_s
        delay = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() + delay > deadline:
                    raise StoreBusyError(
                        f"the RAG database is being written by another process (it holds {self.path}) "
                        f"for more than {timeout_s:g} s: retry later"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
