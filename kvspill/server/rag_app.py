"""`kvspill embed-serve`: the RAG routes alone, without an LLM engine, and how it drains on SIGTERM.

Invariants:
- As in `app.py`: validation failures are 400 `invalid_request_error`, never 422; with `api_key`,
  every route but `/health` needs `Authorization: Bearer <key>`; an unexpected exception is that
  request's 500 in the OpenAI error shape.
- Middleware is pure ASGI, so a waiting `POST /precache/repo` sees its client disconnect.
- SIGTERM (or SIGINT): every index job is cancelled at once and none admitted (503), uvicorn
  stops accepting connections, in-flight requests get `shutdown_timeout` (whole seconds) to end,
  and the process exits 0 within `shutdown_timeout`: `leave_after_drain` waits for the jobs'
  threads until then, and ends the process at once if one is still inside an embedding batch.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from kvspill.rag.jobs import IndexJobs
from kvspill.rag.service import RagService
from kvspill.server.auth import ApiKeyMiddleware
from kvspill.server.errors import exception_response, invalid
from kvspill.server.rag_routes import CANCEL_SHUTDOWN, mount_rag

logger = logging.getLogger("kvspill.rag")


def create_rag_app(service: RagService, api_key: str | None = None) -> FastAPI:
    """The app; its index jobs are `app.state.rag_jobs` (cancelled by `app.state.drain_hooks`)."""
    app = FastAPI(title="kvspill embeddings")

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return invalid(f"malformed JSON body: {first.get('ctx', {}).get('error', 'parse error')}")
        # the field, not the union member pydantic tried last ("input", not "input.str")
        param = next((str(p) for p in first.get("loc", ()) if p != "body"), None)
        return invalid(f"invalid request: {param or 'body'}: {first.get('msg')}", param)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        return exception_response(exc)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": service.model_name, "object": "model", "owned_by": "kvspill"}
        return {"object": "list", "data": [card]}

    if api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key, open_paths=("/health",))
    app.state.rag_jobs = mount_rag(app, service)
    return app


class _DrainingRagServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for drain in getattr(self._app.state, "drain_hooks", ()):  # index jobs: cancelled now
            drain()
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises a captured signal once shut down (exit 143); a drain is a clean exit
        self._captured_signals.clear()


def serve_rag(app: FastAPI, host: str, port: int, shutdown_timeout: float, **uvicorn_options: Any) -> None:
    """Serve `app` (from `create_rag_app`) until SIGTERM/SIGINT, then drain as the module says."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        # whole seconds, rounded down: in-flight requests are cut within our timeout
        timeout_graceful_shutdown=int(shutdown_timeout),
        **uvicorn_options,
    )
    _DrainingRagServer(config, app).run()
    leave_after_drain(app.state.rag_jobs, shutdown_timeout)


def leave_after_drain(jobs: IndexJobs, shutdown_timeout: float, exit_code: int = 0) -> None:
    """Once the server stopped: wait for the index jobs' threads until `shutdown_timeout` after
    the drain began. One still inside an embedding batch by then is left by ending the process at
    once with `exit_code` (it holds no transaction while it embeds): an interpreter that exits
    around a running torch forward aborts (SIGABRT, "terminate called without an active exception")."""
    if not jobs.closed:
        jobs.shutdown(CANCEL_SHUTDOWN)
    deadline = (jobs.closed_at or time.monotonic()) + shutdown_timeout
    if jobs.wait_idle(max(0.0, deadline - time.monotonic())):
        return
    logger.warning("an index job was still embedding at the shutdown timeout: exiting without it")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
