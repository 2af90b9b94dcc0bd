"""The Host-header allow-list: a keyless server on loopback answers only loopback names.

Why: a web page can make a browser send requests to `127.0.0.1:8000` under its own domain name
(DNS rebinding). Without an API key nothing else stands between that page and the model, but the
browser still sends the page's name in `Host`, so refusing names that are not loopback closes it.

Invariants:
- `loopback_only_hosts(host, api_key, extra)` is the default: with no API key on a loopback bind,
  the loopback names plus `extra` (--allowed-hosts); else None (no check) unless `extra` names some.
- A request whose Host (port stripped) is not allowed is a 400 `invalid_host` in OpenAI's shape.
  `*` in the list allows every name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kvspill.server.errors import error_response

LOOPBACK_BINDS = {"127.0.0.1", "localhost", "::1"}
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def loopback_only_hosts(host: str, api_key: str | None, extra: Iterable[str] = ()) -> set[str] | None:
    """The Host names to accept (None: any) for a server bound to `host`."""
    extra = {h.strip().lower() for h in extra if h.strip()}
    if host in LOOPBACK_BINDS and not api_key:
        return LOOPBACK_NAMES | extra
    return extra or None


def host_name(header: str) -> str:
    """`example.com:8000` -> `example.com`; `[::1]:8000` -> `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, _, _ = header.partition(":")
    return name


class HostCheckMiddleware:
    """Pure ASGI; refuses a request whose Host header is not in `allowed`."""

    def __init__(self, app: Any, allowed: set[str]) -> None:
        self.app = app
        self.allowed = allowed
        self.any = "*" in allowed

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and not self.any:
            header = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
            if host_name(header) not in self.allowed:
                response = error_response(
                    400,
                    f"Host {header!r} is not allowed: this server answers {sorted(self.allowed)} "
                    "(add names with --allowed-hosts, or set --api-key)",
                    "invalid_request_error",
                    "invalid_host",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
