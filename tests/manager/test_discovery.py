"""`/api/servers`' probe: servers already listening on this host, found by /health and /v1/models."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvspill.manager.discovery import discover, parse_ports


def _handler(key: str | None, healthy: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._send(200 if healthy else 503, {})
            elif self.path == "/v1/models" and key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, {"error": {"message": "key"}})
            elif self.path == "/v1/models":
                self._send(200, {"data": [{"id": "other-model"}]})
            else:
                self._send(404, {})

        def _send(self, status: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def servers() -> Iterator[list[int]]:
    """Three servers: open and healthy, behind a key it does not get, loading (503)."""
    running = [
        ThreadingHTTPServer(("127.0.0.1", 0), _handler(k, h))
        for k, h in ((None, True), ("x", True), (None, False))
    ]
    for s in running:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield [s.server_address[1] for s in running]
    for s in running:
        s.shutdown()
        s.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_discover_lists_what_answers(servers: list[int]):
    open_, keyed, loading = servers
    closed = _closed_port()
    found = {f.port: f for f in discover([open_, keyed, loading, closed], own_port=closed, api_key="secret")}
    assert set(found) == {open_, keyed, loading}  # nothing listens on `closed`
    assert found[open_].healthy and found[open_].models == ["other-model"] and not found[open_].managed
    assert found[keyed].models == [] and "API key" in (found[keyed].note or "")
    assert not found[loading].healthy and "503" in (found[loading].note or "")


def test_the_managers_key_goes_only_to_its_own_child(servers: list[int]):
    _, keyed, _ = servers
    found = discover([], own_port=keyed, api_key="x")
    assert [(f.port, f.models, f.managed) for f in found] == [(keyed, ["other-model"], True)]


def test_parse_ports():
    assert parse_ports("8000-8002, 9000,") == [8000, 8001, 8002, 9000]
    for bad in ("80a", "9000-8000", "0-3", "1-70000"):
        with pytest.raises(ValueError, match="--probe-ports"):
            parse_ports(bad)
    with pytest.raises(ValueError, match="at most"):
        parse_ports("1000-2000")
