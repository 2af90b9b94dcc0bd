"""500 sequential requests leave the server's anonymous RSS within 5% of where it was after 50."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest


def _anon_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/PID/status")


@pytest.mark.slow
def test_500_sequential_requests_do_not_grow_memory(server):
    body = {"prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0.7}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for i in range(500):
            r = client.post("/v1/completions", json={**body, "seed": i})
            assert r.status_code == 200, r.text
            if i == 49:
                after_50 = _anon_rss_bytes(server.proc.pid)
    after_500 = _anon_rss_bytes(server.proc.pid)
    assert after_500 <= after_50 * 1.05, f"anonymous RSS grew from {after_50} to {after_500} bytes"
