"""Which requests uvicorn's access log records: vLLM's `--disable-uvicorn-access-log` (none) and
`--disable-access-log-for-endpoints` (all but these paths: a health check, a Prometheus scrape or
the manager's discovery probe every few seconds would bury the requests that matter).

A path matches without its query string. The filter sits on the `uvicorn.access` logger, so the
server's log ring (`log_ring.py`, the manager's log view) leaves the same lines out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

ACCESS_LOGGER = "uvicorn.access"


@dataclass(frozen=True)
class AccessLog:
    enabled: bool = True
    quiet_paths: frozenset[str] = frozenset()

    @classmethod
    def from_flags(cls, disable_all: bool, quiet_endpoints: str | None) -> AccessLog:
        """From the flags' values; `quiet_endpoints` is comma-separated paths ("/health,/metrics")."""
        paths = frozenset(p.strip() for p in (quiet_endpoints or "").split(",") if p.strip())
        bad = sorted(p for p in paths if not p.startswith("/"))
        if bad:
            raise ValueError(
                f"--disable-access-log-for-endpoints takes paths that start with '/', like /health,/metrics; "
                f"got {bad[0]!r}"
            )
        return cls(not disable_all, paths)


class _QuietPaths(logging.Filter):
    def __init__(self, paths: frozenset[str]) -> None:
        super().__init__()
        self.paths = paths

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn's access record: args = (client, method, path with query, http version, status)
        args = record.args
        if not isinstance(args, tuple) or len(args) < 3 or not isinstance(args[2], str):
            return True
        return args[2].split("?", 1)[0] not in self.paths


def install(access_log: AccessLog) -> None:
    """Put the quiet-paths filter on uvicorn's access logger (once uvicorn configured its logging:
    its dictConfig keeps a logger's filters). Replaces one an earlier call installed."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for f in [f for f in logger.filters if isinstance(f, _QuietPaths)]:
        logger.removeFilter(f)
    if access_log.quiet_paths:
        logger.addFilter(_QuietPaths(access_log.quiet_paths))
