"""Slow bodies and connection hogs (issue 48, item 6): a body sent a byte at a time is cut at the
body timeout, and one client address past its connection cap is refused while other clients
are served."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from kvspill.server import ServerSettings
from kvspill.server.slow_clients import guarded_protocol

from .conftest import AppServer, serve_in_thread, stop_in_thread
from .test_engine_thread import StepEngine

ATTACKER = "127.0.0.2"  # another loopback address: the attacker's connections count apart


@pytest.fixture
def server() -> Iterator[AppServer]:
    protocol = guarded_protocol(header_timeout=5.0, body_timeout=1.5, max_connections_per_client=8)
    s = serve_in_thread(
        StepEngine, ServerSettings("fake", allowed_hosts=None), http=protocol, limit_concurrency=24
    )
    try:
        yield s
    finally:
        stop_in_thread(s)


def _port(s: AppServer) -> int:
    return int(s.url.rsplit(":", 1)[1])


def _slow_post(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(ATTACKER, 0))
    conn.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    return conn


def test_a_slow_body_is_cut_at_the_body_timeout(server: AppServer) -> None:
    with _slow_post(_port(server)) as conn:
        start = time.monotonic()
        try:
            while True:
                conn.sendall(b" ")  # a byte every 0.1 s: never finishes the 1000-byte body
                time.sleep(0.1)
                if time.monotonic() - start > 5:
                    pytest.fail("the server kept a slow body past its body timeout")
        except OSError:
            pass
        assert 1.0 < time.monotonic() - start < 4


def test_one_client_cannot_take_every_slot(server: AppServer) -> None:
    port = _port(server)
    with ExitStack() as stack:
        hogs = [stack.enter_context(_slow_post(port)) for _ in range(8)]
        time.sleep(0.2)
        refused = stack.enter_context(
            socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(ATTACKER, 0))
        )
        answer = refused.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"too_many_connections" in answer
        # every other client is served while the attacker holds its connections
        for _ in range(3):
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        assert len(hogs) == 8
    time.sleep(1.8)  # past the body timeout the hogs' slots are free again
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(ATTACKER, 0)) as again:
        again.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert again.recv(4096).startswith(b"HTTP/1.1 200")
