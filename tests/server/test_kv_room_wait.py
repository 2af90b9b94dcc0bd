"""A request the KV tiers have no room for yet waits for a running one to end (no 503)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import Server, start_server, stop_server


@pytest.fixture(scope="module")
def one_request_room_server(
    tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("kvroom") / "server.log"
    # 256 tokens of KV: two requests of a short prompt + 100 tokens at a time; a third has no room
    # until one ends (it got a 503 before 2026-12-05)
    s = start_server(tiny_llama_dir, "--kv-cache-memory", "96KiB", "--block-size", "16", log=log)
    yield s
    stop_server(s)


def test_requests_past_the_kv_room_wait_for_it(one_request_room_server):
    url = one_request_room_server.url
    done: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        body = {"prompt": "hello there", "max_tokens": 100, "ignore_eos": True}
        r = httpx.post(url + "/v1/completions", json=body, timeout=120)
        with lock:
            done.append(r)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r.status_code for r in done] == [200, 200, 200], [r.text for r in done if r.status_code != 200]
    assert all(r.json()["usage"]["completion_tokens"] == 100 for r in done)
