"""The RAG service's own failures that are not a client's mistake: a busy database, a full job
queue, a cancelled index.

Invariants:
- None of these is a `KvspillError` (a client error, HTTP 4xx): the routes map them one by one
  (`server/rag_routes.py`): busy and full are 503s with `Retry-After`, a cancelled index is the
  answer of the request that waited for it.
"""

from __future__ import annotations


class StoreBusyError(RuntimeError):
    """The database stayed locked by another writer past the store's busy timeout (HTTP 503)."""


class JobsFullError(RuntimeError):
    """As many index jobs run and wait as the server takes (HTTP 503 with Retry-After)."""


class JobsClosedError(RuntimeError):
    """The server is shutting down: no index job is admitted (HTTP 503)."""


class IndexCancelledError(RuntimeError):
    """An index stopped at a cancel check, before the store's swap: the index is as it was.
    `reason` says who cancelled it (a DELETE, a client gone, the server shutting down)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason or "the index was cancelled")
        self.reason = reason
