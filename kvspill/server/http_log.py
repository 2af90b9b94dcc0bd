"""What the HTTP server (uvicorn) logs: vLLM's `--uvicorn-log-level` (its own lines' level),
`--disable-uvicorn-access-log` (no request lines) and `--disable-access-log-for-endpoints` (none
for these paths: a health check, a Prometheus scrape or the manager's discovery probe every few
seconds would bury the requests that matter).

A path matches without its query string. The filter sits on the `uvicorn.access` logger, so the
server's log ring (`log_ring.py`, the manager's log view) leaves the same lines out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

ACCESS_LOGGER = "uvicorn.access"
LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


@dataclass(frozen=True)
class HttpLog:
    access: bool = True  # a line per request
    quiet_paths: frozenset[str] = frozenset()
    level: str = "info"  # uvicorn's own lines

    @classmethod
    def from_flags(cls, disable_access: bool, quiet_endpoints: str | None, level: str = "info") -> HttpLog:
        """From the flags' values; `quiet_endpoints` is comma-separated paths ("/health,/metrics")."""
        if level not in LEVELS:
            raise ValueError(f"--uvicorn-log-level must be one of {', '.join(LEVELS)}, got {level!r}")
        paths = frozenset(p.strip() for p in (quiet_endpoints or "").split(",") if p.strip())
        bad = sorted(p for p in paths if not p.startswith("/"))
        if bad:
            raise ValueError(
                f"--disable-access-log-for-endpoints takes paths that start with '/', like /health,/metrics; "
                f"got {bad[0]!r}"
            )
        return cls(not disable_access, paths, level)


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


def install(http_log: HttpLog) -> None:
    """Put the quiet-paths filter on uvicorn's access logger (once uvicorn configured its logging:
    its dictConfig keeps a logger's filters). Replaces one an earlier call installed."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for f in [f for f in logger.filters if isinstance(f, _QuietPaths)]:
        logger.removeFilter(f)
    if http_log.quiet_paths:
        logger.addFilter(_QuietPaths(http_log.quiet_paths))
