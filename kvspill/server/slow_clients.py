"""An HTTP/1.1 protocol (uvicorn's h11 one) that closes connections slow to send their request,
and caps the connections one client address may hold.

uvicorn times out an idle keep-alive connection (`timeout_keep_alive`), but a fresh connection
that sends nothing, or sends its headers a byte at a time (slowloris), holds its socket and a
slot of `--limit-concurrency` forever: any byte it sends cancels the keep-alive timer. A body
sent a byte at a time did the same: 1,023 such connections took every slot, and /health and
completions got 503s (issue 48, item 6).

Invariants:
- From the moment a connection is ready for a request (accepted, or its last response sent) it
  has `header_timeout` seconds to finish the request head (method, path, headers); else it is
  closed.
- From the end of the head, the body has `body_timeout` seconds to arrive whole; else the
  connection is closed (the app sees a disconnect, as for a client that left).
- One client address holds at most `max_connections_per_client` connections at once; a connection
  past that is answered 503 with `Retry-After` and closed before any request is read, so one
  client cannot take the slots every other client needs. The response is not timed here.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

from kvspill.server.connection_limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
)


def _refusal(limit: int) -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": f"this client address holds {limit} connections already (the server's "
                "--max-connections-per-client): reuse or close one and retry",
                "type": "server_busy",
                "param": None,
                "code": "too_many_connections",
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
        f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class GuardedProtocol(H11Protocol):
    header_timeout: ClassVar[float] = DEFAULT_HEADER_TIMEOUT_S
    body_timeout: ClassVar[float] = DEFAULT_BODY_TIMEOUT_S
    max_connections_per_client: ClassVar[int] = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    open_by_client: ClassVar[Counter[str]]  # one per server: `guarded_protocol` makes the class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._counted: str | None = None  # the client address this connection counts against
        self._timer_kind = "head"  # what the timer waits for: "head" or "body"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        host = self.client[0] if self.client else ""
        if self.open_by_client[host] >= self.max_connections_per_client:
            transport.write(_refusal(self.max_connections_per_client))
            transport.close()
            return
        self.open_by_client[host] += 1
        self._counted = host
        self._arm(self.header_timeout)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return  # still before a head (the head timer runs) or between requests
        if cycle.more_body:
            if self._timer_kind != "body":
                self._arm(self.body_timeout, "body")  # the head arrived: now the body is timed
        else:
            self._cancel()  # the whole request arrived: the app serves it

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm(self.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self._counted is not None:
            self.open_by_client[self._counted] -= 1
            if self.open_by_client[self._counted] <= 0:
                del self.open_by_client[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def _arm(self, seconds: float, kind: str = "head") -> None:
        self._cancel()
        if not self.transport.is_closing():
            self._timer_kind = kind
            self._timer = self.loop.call_later(seconds, self._timed_out)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        cycle = self.cycle
        waiting_for_head = cycle is None or cycle.response_complete
        waiting_for_body = cycle is not None and not cycle.response_complete and cycle.more_body
        if waiting_for_head or waiting_for_body:
            self.transport.close()


def guarded_protocol(
    header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's `http=`: its own per-client counts, these limits."""
    attrs = {
        "header_timeout": header_timeout,
        "body_timeout": body_timeout,
        "max_connections_per_client": max_connections_per_client,
        "open_by_client": Counter(),
    }
    return type("GuardedProtocol", (GuardedProtocol,), attrs)


def with_header_timeout(seconds: float) -> type[GuardedProtocol]:
    """The protocol with this head timeout and the default body timeout and per-client cap."""
    return guarded_protocol(header_timeout=seconds)
