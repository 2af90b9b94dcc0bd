"""The API key check of `kvspill serve --api-key`: `Authorization: Bearer <key>`, compared in
constant time; the open paths (health, metrics, the read-only page) need none, with or without
--root-path's prefix."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection
from typing import Any

from kvspill.server.errors import error_response
from kvspill.server.root_path import route_path


class ApiKeyMiddleware:
    """Pure ASGI (not BaseHTTPMiddleware, which hides client disconnects from handlers)."""

    def __init__(self, app: Any, api_key: str, open_paths: Collection[str] = ()) -> None:
        self.app = app
        self.key = api_key.encode()
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and route_path(scope) not in self.open_paths:
            header = dict(scope.get("headers", [])).get(b"authorization", b"")
            token = header[7:] if header[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self.key):
                response = error_response(
                    401,
                    "missing or wrong API key: send Authorization: Bearer <key>",
                    "authentication_error",
                    "invalid_api_key",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
