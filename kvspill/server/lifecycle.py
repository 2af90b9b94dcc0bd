"""Run the app under uvicorn with kvspill's SIGTERM contract.

Invariants:
- On SIGTERM (or SIGINT) the server stops admitting at once (new requests: 503 `unavailable`),
  uvicorn stops accepting connections, and in-flight requests get `shutdown_timeout` seconds to
  finish. Then every request still in flight is aborted in the engine: a stream ends with an
  error event and `data: [DONE]`, a non-streaming request gets 503 `unavailable`. Only then does
  the app's lifespan stop the engine thread. The aborts reach the handlers at once, even while
  a long step runs (`AsyncEngine.abort_all`), and the process exits 0 after draining.
- `app.state.drain_hooks` (if any) run at SIGTERM, right after admission stops: the RAG routes
  cancel their index jobs there (`rag_routes.mount_rag`), which could run for minutes.
- uvicorn's own graceful timeout is a backstop set a little past ours: the aborts end the
  handlers first, so clients get a well-formed answer rather than a cut connection.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI

from kvspill.server.async_engine import AsyncEngine
from kvspill.server.http_log import HttpLog
from kvspill.server.http_log import install as install_http_log

logger = logging.getLogger(__name__)

BACKSTOP_S = 2  # uvicorn (whole seconds) cancels handler tasks this long after our aborts, if any still run


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ae: AsyncEngine, shutdown_timeout: float) -> None:
        super().__init__(config)
        self._ae = ae
        self._shutdown_timeout = shutdown_timeout

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._ae.stop_admitting()
        for drain in getattr(getattr(self.config.app, "state", None), "drain_hooks", ()):  # RAG index jobs
            drain()
        timeout = self._shutdown_timeout
        message = (
            f"the server is shutting down: this request was still running {timeout:g} s after "
            "SIGTERM (--shutdown-timeout) and was aborted"
        )
        handle = asyncio.get_running_loop().call_later(timeout, self._abort_in_flight, message)
        try:
            await super().shutdown(sockets)
        finally:
            handle.cancel()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises a captured signal once it has shut down (exit 143 for SIGTERM); a
        # drained shutdown is a clean exit, so forget it and let the process exit 0.
        self._captured_signals.clear()

    def _abort_in_flight(self, message: str) -> None:
        logger.warning("shutdown timeout reached: aborting the requests still in flight")
        self._ae.abort_all(message)


def serve(
    app: FastAPI,
    host: str,
    port: int,
    shutdown_timeout: float,
    http_log: HttpLog = HttpLog(),
    **uvicorn_options: Any,
) -> None:
    """Serve `app` (from `create_app`) until SIGTERM/SIGINT, then drain as the module says."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=http_log.level,
        timeout_graceful_shutdown=math.ceil(shutdown_timeout) + BACKSTOP_S,
        access_log=http_log.access,
        **uvicorn_options,
    )
    install_http_log(http_log)  # after Config: it configures uvicorn's loggers
    _DrainingServer(config, app.state.engine, shutdown_timeout).run()
