"""The server's recent log lines in memory, for `GET /logs` (the log pane of the `/ui` page).

Invariants:
- One `LogRing` per app, attached to the root logger (kvspill's records propagate there) and to
  uvicorn's loggers (which do not propagate) while the app runs: attached in the router's
  lifespan, because uvicorn's logging config, applied when the server is built, drops any handler
  added to its loggers before; detached when the app stops, so apps built in one process (tests)
  do not collect each other's lines.
- Keeps the last `max_lines` formatted lines; leaves out the access lines of the dashboard's own
  polling (`POLL_QUERY` in the query string) and of GET /health (a supervisor's probes).
- `GET /logs?lines=N` (1..2000) is behind `--api-key` like every route but /health and /metrics.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from kvspill.dashboard.page import POLL_QUERY
from kvspill.server.errors import invalid

MAX_LINES = 2000
_LOGGERS = ("", "uvicorn", "uvicorn.access")  # "" is the root logger; uvicorn.error propagates to uvicorn
_HEALTH_PROBE = '"GET /health HTTP/'


class LogRing(logging.Handler):
    def __init__(self, max_lines: int = MAX_LINES) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # a record whose arguments do not format: logging's own rule, never raise
            self.handleError(record)
            return
        if POLL_QUERY in line or _HEALTH_PROBE in line:
            return
        self.lines.append(line)

    def attach(self) -> None:
        for name in _LOGGERS:
            logging.getLogger(name).addHandler(self)

    def detach(self) -> None:
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(self)

    def tail(self, num_lines: int) -> list[str]:
        return list(self.lines)[-num_lines:]


def log_router(ring: LogRing | None = None) -> APIRouter:
    """`GET /logs`: the last lines of this server's log (the ring attached for the app's lifetime)."""
    ring = ring if ring is not None else LogRing()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ring.attach()
        try:
            yield
        finally:
            ring.detach()

    router = APIRouter(lifespan=lifespan)

    @router.get("/logs")
    def logs(lines: int = 200) -> Any:
        if not 1 <= lines <= MAX_LINES:
            return invalid(f"lines must be between 1 and {MAX_LINES}, not {lines}", "lines")
        return JSONResponse({"lines": ring.tail(lines)})

    return router
