"""OpenAI-shaped error bodies and the mapping from kvspill/server exceptions to HTTP status.

Invariants:
- Every body is `{"error": {"message", "type", "param", "code"}}`.
- A client error (KvspillError, validation) is a 4xx, never a 5xx: openai-python retries 5xx.
- 500 `server_error` only for failures inside a step; 503 carries `Retry-After`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from kvspill.errors import (
    ContextLengthExceededError,
    ForbiddenPathError,
    InvalidParameterError,
    KVCacheBusyError,
    KvspillError,
)
from kvspill.server.async_engine import EngineUnavailableError, ServerBusyError, StepFailedError

RETRY_AFTER_S = "1"


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(message, type_, code, param), status_code=status, headers=headers)


def invalid(message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return error_response(400, message, "invalid_request_error", code, param)


def exception_status(
    e: BaseException, prompt_param: str = "messages"
) -> tuple[int, dict, dict[str, str] | None]:
    """(status, body, headers) for an exception raised while serving a request; `prompt_param`:
    the field a context-length error names (`prompt` on completions)."""
    if isinstance(e, ContextLengthExceededError):
        return 400, error_body(str(e), "invalid_request_error", "context_length_exceeded", prompt_param), None
    if isinstance(e, InvalidParameterError):
        return 400, error_body(str(e), "invalid_request_error", "invalid_value", e.param), None
    if isinstance(e, ForbiddenPathError):
        return 403, error_body(str(e), "permission_error", "path_forbidden", e.param), None
    if isinstance(e, KVCacheBusyError):
        return 503, error_body(str(e), "server_busy", "server_busy"), {"Retry-After": "1"}
    if isinstance(e, KvspillError):
        return 400, error_body(str(e), "invalid_request_error", "invalid_request"), None
    if isinstance(e, ServerBusyError):
        headers = {"Retry-After": RETRY_AFTER_S}
        return 503, error_body(str(e), "server_busy", "server_busy"), headers
    if isinstance(e, EngineUnavailableError):
        headers = {"Retry-After": RETRY_AFTER_S}
        return 503, error_body(str(e), "unavailable", "unavailable"), headers
    if isinstance(e, StepFailedError):
        return 500, error_body(str(e), "server_error", "server_error"), None
    return 500, error_body(f"internal error: {type(e).__name__}: {e}", "server_error", "server_error"), None


def exception_response(e: BaseException, prompt_param: str = "messages") -> JSONResponse:
    status, body, headers = exception_status(e, prompt_param)
    return JSONResponse(body, status_code=status, headers=headers)


_OPENAI_ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def document_400s(app: FastAPI) -> None:
    """The OpenAPI document says what the server does: invalid requests are 400s in the OpenAI
    error shape (app.py's validation handler), not FastAPI's default 422."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for path in schema.get("paths", {}).values():
                for op in path.values():
                    responses = op.get("responses", {})
                    if responses.pop("422", None) is not None:
                        responses["400"] = {
                            "description": "Invalid request (OpenAI error shape)",
                            "content": {"application/json": {"schema": _OPENAI_ERROR_SCHEMA}},
                        }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
