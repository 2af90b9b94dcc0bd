"""`kvspill embed-serve`: the RAG routes alone, without an LLM engine.

Invariants (as in `app.py`): validation failures are 400 `invalid_request_error`, never 422;
with `api_key`, every route but `/health` needs `Authorization: Bearer <key>`; an unexpected
exception is that request's 500 in the OpenAI error shape.
"""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.types import ASGIApp

from kvspill.rag.service import RagService
from kvspill.server.errors import error_response, exception_response, invalid
from kvspill.server.rag_routes import rag_router


class _BearerAuth(BaseHTTPMiddleware):
    """No streaming routes here, so BaseHTTPMiddleware's hiding of disconnects costs nothing."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        super().__init__(app)
        self.key = api_key.encode()

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path != "/health":
            header = request.headers.get("authorization", "")
            token = header[7:].encode() if header[:7].lower() == "bearer " else b""
            if not hmac.compare_digest(token, self.key):
                return error_response(
                    401,
                    "missing or wrong API key: send Authorization: Bearer <key>",
                    "authentication_error",
                    "invalid_api_key",
                )
        return await call_next(request)


def create_rag_app(service: RagService, api_key: str | None = None) -> FastAPI:
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
        app.add_middleware(_BearerAuth, api_key=api_key)
    app.include_router(rag_router(service))
    return app
