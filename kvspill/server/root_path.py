"""Serving under a URL prefix (`kvspill serve --root-path /llm`, vLLM's flag): behind a reverse
proxy that routes /llm/... to this server, with or without stripping the prefix.

Invariants:
- The ASGI scope's `root_path`, set by `RootPathMiddleware` (what FastAPI's deprecated
  `root_path=` did; not uvicorn's, which prepends the prefix to every path and so only works
  behind a proxy that strips it): a route answers at /llm/v1/models and at /v1/models alike
  (Starlette routes on the path less the prefix), and the OpenAPI page names the prefix.
- The prefix is normalised once (`normalize_root_path`): "" or "/a/b", no trailing slash.
- A middleware that matches paths (the API key's open paths) matches `route_path(scope)`, the
  path as the routes see it: /llm/health is as open as /health.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_NOT_IN_PREFIX = set(" ?#%\t\r\n\"'<>\\")


def normalize_root_path(value: str | None) -> str:
    """ "" for no prefix; else "/seg/seg" (a trailing slash dropped). ValueError saying what to
    give for anything that is not a plain URL path."""
    if not value or value == "/":
        return ""
    if not value.startswith("/") or value.startswith("//"):
        raise ValueError(f"--root-path {value!r}: give a URL path that starts with one '/', like /llm")
    bad = sorted(_NOT_IN_PREFIX.intersection(value))
    if bad:
        raise ValueError(f"--root-path {value!r}: a URL path without {' '.join(map(repr, bad))}, like /llm")
    return value.rstrip("/")


def route_path(scope: dict[str, Any]) -> str:
    """The request's path less the prefix, when it carries it (Starlette's own rule)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


class RootPathMiddleware:
    """Pure ASGI, outermost: every request's scope carries the prefix as its `root_path`."""

    def __init__(self, app: Any, root_path: str) -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = dict(scope, root_path=self.root_path)
        await self.app(scope, receive, send)
