"""/metrics: the engine's totals typed as counters, `model_name` on every series, and a scrape that
answers even when the engine's statistics fail (the error is logged and counted)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvspill.server.async_engine import RequestTimes
from kvspill.server.metrics import ServerMetrics
from kvspill.stats import ColdAttentionSeconds, KVStats, RunnerKVStats, SchedulerStats, TierCounters
from kvspill.types import RequestOutput

MODEL = "served-name"


class _BrokenStats:
    ready = True

    async def kv_stats(self) -> None:
        raise RuntimeError("stats exploded")


class _NotReady:
    ready = False


def _stats(preemptions: int, moved: int) -> KVStats:
    return KVStats(
        bytes_moved={"gpu_to_cpu": moved, "cpu_to_gpu": moved // 2},
        cold_attention_seconds=ColdAttentionSeconds(cpu=1.5, stream=0.25),
        scheduler=SchedulerStats(
            num_running=2,
            num_waiting=1,
            num_preemptions=preemptions,
            kv_cache_usage=0.5,
            prefix_cache_queries=64,
            prefix_cache_hits=16,
            kv_tiers=TierCounters(num_demoted_prefix_blocks=3),
        ),
        runner=RunnerKVStats(disk_read_errors=0, disk_write_errors=1),
    )


def _families(metrics: ServerMetrics) -> dict[str, tuple[str, dict[tuple, float]]]:
    """family name -> (type, {(sample name, sorted labels): value})."""
    return {
        f.name: (f.type, {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples})
        for f in text_string_to_metric_families(metrics.render().decode())
    }


def test_engine_totals_are_counters_with_their_total_names() -> None:
    metrics = ServerMetrics(MODEL)
    metrics.refresh(_stats(preemptions=7, moved=4096))
    got = _families(metrics)
    m = ("model_name", MODEL)
    expected = {
        "kvspill:kv_moved_bytes": {
            ("kvspill:kv_moved_bytes_total", (("dst", "cpu"), m, ("src", "gpu"))): 4096.0,
            ("kvspill:kv_moved_bytes_total", (("dst", "gpu"), m, ("src", "cpu"))): 2048.0,
        },
        "kvspill:num_preemptions": {("kvspill:num_preemptions_total", (m,)): 7.0},
        "kvspill:prefix_cache_demoted_blocks": {("kvspill:prefix_cache_demoted_blocks_total", (m,)): 3.0},
        "kvspill:disk_tier_errors": {
            ("kvspill:disk_tier_errors_total", (m, ("op", "read"))): 0.0,
            ("kvspill:disk_tier_errors_total", (m, ("op", "write"))): 1.0,
        },
        "kvspill:kv_cold_attention_seconds": {
            ("kvspill:kv_cold_attention_seconds_total", (m, ("path", "cpu"))): 1.5,
            ("kvspill:kv_cold_attention_seconds_total", (m, ("path", "stream"))): 0.25,
        },
        "vllm:num_preemptions": {("vllm:num_preemptions_total", (("engine", "0"), m)): 7.0},
        "vllm:prefix_cache_queries": {("vllm:prefix_cache_queries_total", (("engine", "0"), m)): 64.0},
        "vllm:prefix_cache_hits": {("vllm:prefix_cache_hits_total", (("engine", "0"), m)): 16.0},
    }
    for name, samples in expected.items():
        assert got[name] == ("counter", samples), name
    assert got["vllm:kv_cache_usage_perc"] == (
        "gauge",
        {("vllm:kv_cache_usage_perc", (("engine", "0"), m)): 0.5},
    )
    assert got["kvspill:num_requests_running"] == ("gauge", {("kvspill:num_requests_running", (m,)): 2.0})
    # the next snapshot's totals replace the last ones (the engine's counts, never re-added here)
    metrics.refresh(_stats(preemptions=9, moved=8192))
    assert _families(metrics)["kvspill:num_preemptions"][1] == {("kvspill:num_preemptions_total", (m,)): 9.0}


def test_every_series_carries_model_name() -> None:
    metrics = ServerMetrics(MODEL)
    metrics.refresh(_stats(preemptions=1, moved=512))
    metrics.rejected("ServerBusyError")
    first = RequestOutput("r", None, [1, 2, 3], token_ids=[5], delta_token_ids=[5])
    metrics.observe_output(first, RequestTimes(arrival=0.0))
    last = RequestOutput(
        "r",
        None,
        [1, 2, 3],
        token_ids=[5, 6, 7],
        delta_token_ids=[6, 7],
        finished=True,
        finish_reason="length",
    )
    metrics.observe_output(last, RequestTimes(arrival=0.0, first_output=1.0))
    families = list(text_string_to_metric_families(metrics.render().decode()))
    names = {f.name for f in families}
    assert {"kvspill:requests_rejected", "vllm:request_success", "vllm:e2e_request_latency_seconds"} <= names
    unlabelled = [(f.name, s) for f in families for s in f.samples if s.labels.get("model_name") != MODEL]
    assert unlabelled == []
    values = {(s.name, s.labels.get("finished_reason")): s.value for f in families for s in f.samples}
    assert values[("vllm:request_success_total", "length")] == 1.0
    assert values[("vllm:request_success_total", "stop")] == 0.0  # every reason from the start, as vLLM
    assert values[("vllm:generation_tokens_total", None)] == 3.0
    assert values[("vllm:prompt_tokens_total", None)] == 3.0
    assert values[("vllm:inter_token_latency_seconds_count", None)] == 1.0
    assert values[("vllm:request_generation_tokens_sum", None)] == 3.0


def test_a_failing_stats_read_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ServerMetrics(MODEL)
    metrics.refresh(_stats(preemptions=4, moved=0))
    with caplog.at_level(logging.ERROR, logger="kvspill.server.metrics"):
        text = asyncio.run(metrics.scrape(_BrokenStats())).decode()  # type: ignore[arg-type]
        text = asyncio.run(metrics.scrape(_BrokenStats())).decode()  # type: ignore[arg-type]
    assert f'kvspill:stats_errors_total{{model_name="{MODEL}"}} 2.0' in text
    assert "kvspill:host_rss_bytes" in text  # the rest of the scrape still answers
    assert f'kvspill:num_preemptions_total{{model_name="{MODEL}"}} 4.0' in text  # the last totals stay
    assert any("stats exploded" in (r.exc_text or "") for r in caplog.records)
    idle = asyncio.run(metrics.scrape(_NotReady())).decode()  # type: ignore[arg-type]
    assert f'kvspill:stats_errors_total{{model_name="{MODEL}"}} 2.0' in idle  # not ready is not an error


def test_no_engine_totals_before_the_first_snapshot() -> None:
    text = ServerMetrics(MODEL).render().decode()
    assert "kvspill:num_preemptions_total" not in text and "vllm:prefix_cache_hits_total" not in text
    assert f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 0.0' in text
