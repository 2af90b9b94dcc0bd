"""/metrics answers even when the engine's statistics fail: the error is logged and counted."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kvspill.server.metrics import ServerMetrics


class _BrokenStats:
    ready = True

    async def kv_stats(self) -> None:
        raise RuntimeError("stats exploded")


class _NotReady:
    ready = False


def test_a_failing_stats_read_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ServerMetrics()
    with caplog.at_level(logging.ERROR, logger="kvspill.server.metrics"):
        text = asyncio.run(metrics.scrape(_BrokenStats())).decode()  # type: ignore[arg-type]
        text = asyncio.run(metrics.scrape(_BrokenStats())).decode()  # type: ignore[arg-type]
    assert "kvspill:stats_errors_total 2.0" in text
    assert "kvspill:host_rss_bytes" in text  # the rest of the scrape still answers
    assert any("stats exploded" in (r.exc_text or "") for r in caplog.records)
    idle = asyncio.run(metrics.scrape(_NotReady())).decode()  # type: ignore[arg-type]
    assert "kvspill:stats_errors_total 2.0" in idle  # not ready is not an error
