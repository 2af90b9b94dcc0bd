"""The server probe: tiers, queue and rates from /v1/kv; a refused connection is reported, not fatal."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kvspill.monitor.server import ServerProbe, _prometheus_queue

MiB = 2**20


def _kv(moves: int, moved: int) -> dict:
    return {
        "tiers": {
            "gpu": {"blocks": 8, "used_blocks": 6, "bytes": 8 * MiB, "used_bytes": 6 * MiB},
            "cpu": {"blocks": 16, "used_blocks": 2, "bytes": 16 * MiB, "used_bytes": 2 * MiB},
            "disk": {"blocks": 0, "used_blocks": 0, "bytes": 0, "used_bytes": 0},
        },
        "bytes_moved": {"gpu_to_cpu": moved, "cpu_to_gpu": 0},
        "requests": {"a": {}, "b": {}},
        "scheduler": {"num_running": 2, "num_waiting": 3, "kv_block_moves": {"gpu_to_cpu": moves}},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def kv_server():
    """A stand-in server whose /v1/kv returns the next payload of `payloads` (the last repeats)."""
    payloads: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/v1/kv":
                self.send_error(404)
                return
            key = payloads[0].get("api_key") if payloads else None
            if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
                self.send_error(401)
                return
            body = json.dumps(payloads.pop(0) if len(payloads) > 1 else payloads[0]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", payloads
    server.shutdown()
    server.server_close()


def test_refused_connection_is_reported():
    reading = ServerProbe(f"http://127.0.0.1:{_free_port()}", timeout_s=0.5).read(0.0)
    assert not reading.ok
    assert "/v1/kv" in reading.error and "refused" in reading.error.lower()


def test_tiers_queue_and_rates(kv_server):
    url, payloads = kv_server
    payloads += [_kv(moves=10, moved=20 * MiB), _kv(moves=30, moved=60 * MiB)]
    probe = ServerProbe(url + "/")
    first = probe.read(100.0)
    assert first.ok and first.block_moves_per_s is None
    assert first.tiers["gpu"].used_blocks == 6 and first.tiers["cpu"].used_bytes == 2 * MiB
    assert (first.num_running, first.num_waiting, first.num_requests) == (2, 3, 2)
    second = probe.read(102.0)
    assert second.block_moves_per_s == pytest.approx(10.0)
    assert second.bytes_moved_per_s == pytest.approx(20 * MiB)
    assert (first.bytes_moved_total, second.bytes_moved_total) == (20 * MiB, 60 * MiB)


def test_a_server_with_an_api_key(kv_server):
    """`kvspill monitor --api-key` (KVSPILL_API_KEY): the probe sends it; without it a 401 is shown."""
    url, payloads = kv_server
    payloads.append({**_kv(moves=1, moved=MiB), "api_key": "k1"})
    refused = ServerProbe(url).read(0.0)
    assert not refused.ok and "HTTP 401" in refused.error
    reading = ServerProbe(url, api_key="k1").read(0.0)
    assert reading.ok and reading.tiers["gpu"].used_blocks == 6


def test_session_keeps_going_without_the_server(make_session):
    session = make_session([50, 86], server=ServerProbe(f"http://127.0.0.1:{_free_port()}", timeout_s=0.2))
    session.step()
    snapshot, alerts = session.step()
    assert snapshot.server is not None and not snapshot.server.ok
    assert [a.level_percent for a in alerts] == [85.0]


def test_queue_from_prometheus_text():
    text = (
        "# HELP kvspill_num_requests_running x\nkvspill_num_requests_running 4\n"
        'kvspill_num_requests_waiting{model="m"} 7.0\nother_metric 1\n'
    )
    assert _prometheus_queue(text) == (4, 7)


def test_queue_from_one_prefix_when_a_server_exports_two():
    # a kvspill server exports its gauges under vLLM's names too: counted once
    text = (
        'kvspill:num_requests_running{model_name="m"} 3\nvllm:num_requests_running{engine="0",model_name="m"} 3\n'
        'kvspill:num_requests_waiting{model_name="m"} 2\nvllm:num_requests_waiting{engine="0",model_name="m"} 2\n'
    )
    assert _prometheus_queue(text) == (3, 2)
    vllm_only = 'vllm:num_requests_running{model_name="a"} 1\nvllm:num_requests_running{model_name="b"} 2\n'
    assert _prometheus_queue(vllm_only) == (3, None)
