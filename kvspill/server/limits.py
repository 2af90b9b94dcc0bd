"""What a request body must pass before FastAPI parses it, and OpenAI-shaped bodies for the
errors Starlette answers itself.

Invariants:
- A body over the limit is a 413 before it is parsed: at once from `Content-Length`, else as
  soon as the bytes read pass the limit (a chunked upload is not read to its end).
- A body that is not valid UTF-8, or whose JSON escapes a lone UTF-16 surrogate (`"\\ud800"`),
  is a 400 in OpenAI's error shape: such a string cannot be tokenized or written back as UTF-8,
  and letting it through gave 500s and tracebacks deep in the handlers.
- 404, 405 and Starlette's body-parsing 400 (e.g. JSON nested past the parser's depth) are
  OpenAI-shaped too, never FastAPI's `{"detail": ...}`.
- The default limit is sized for the longest prompt the model takes: REQUEST_BYTES_PER_TOKEN x
  max_model_len (at least MIN_REQUEST_BYTES), known once the engine has loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kvspill.server.errors import error_response, invalid

# JSON text of one token at worst: a 6-byte `\uXXXX` escape per UTF-16 unit, two units for an
# emoji, a few characters per token; or a token id of up to 6 digits and a comma. Generous.
REQUEST_BYTES_PER_TOKEN = 64
MIN_REQUEST_BYTES = 1 << 20
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def default_max_request_bytes(max_model_len: int | None) -> int:
    if max_model_len is None:
        return MIN_REQUEST_BYTES
    return max(MIN_REQUEST_BYTES, REQUEST_BYTES_PER_TOKEN * max_model_len)


def body_problem(body: bytes) -> str | None:
    """Why `body` cannot be a request's text (invalid UTF-8, a lone surrogate), or None."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"the request body is not valid UTF-8 (byte {e.start}: {e.reason}): send UTF-8 text"
    if _SURROGATE_ESCAPE.search(body) is None:
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None  # FastAPI's parser says what is wrong with it
    try:
        # json.loads joins a valid surrogate pair into one character; a lone one stays unencodable.
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return (
            "the request holds a lone UTF-16 surrogate escape (e.g. \\ud800) that is not a character: "
            "send valid Unicode text"
        )
    except RecursionError:
        return None
    return None


class BodyLimitMiddleware:
    """Pure ASGI: reads a POST body up to `max_bytes()` and checks it before the app sees it; then
    replays it to the app (later `receive` calls, e.g. disconnect polling, go to the client)."""

    def __init__(self, app: Any, max_bytes: Callable[[], int]) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes()
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(declared, limit)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await _too_large(size, limit, at_least=True)(scope, receive, send)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if (problem := body_problem(body)) is not None:
            await invalid(problem, code="invalid_encoding")(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _content_length(scope: dict) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large(size: int, limit: int, at_least: bool = False) -> JSONResponse:
    return error_response(
        413,
        f"the request body is {'over ' if at_least else ''}{size} bytes; this server takes at most {limit} "
        "(--max-request-bytes): send a shorter prompt or fewer prompts",
        "invalid_request_error",
        "request_too_large",
    )


def _replay(body: bytes, receive: Callable) -> Callable:
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def http_error_message(request: Request, exc: StarletteHTTPException) -> str:
    """What Starlette's own error (no route, wrong method) says to the client (the manager's too)."""
    if exc.status_code == 404:
        return f"no route {request.method} {request.url.path}"
    if exc.status_code == 405:
        return f"{request.url.path} does not take {request.method}"
    return str(exc.detail)


def add_http_error_handlers(app: FastAPI) -> None:
    """Starlette's own errors (no route, wrong method, an unparsable body) in OpenAI's shape."""

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = http_error_message(request, exc)
        if exc.status_code == 404:
            message += " (see /docs for the API)"
        code = _HTTP_CODES.get(exc.status_code, "invalid_request")
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, message, "invalid_request_error", code, headers=headers)
