"""Prometheus metrics (prefix `kvspill:`), names mirroring vLLM's plus the KV tiers'.

Invariants:
- One `CollectorRegistry` per app (tests can run several apps in one process).
- Counters and histograms are fed from the engine thread's per-output callback (`observe_output`)
  and from the HTTP layer (`rejected`); gauges are refreshed at scrape time from a `kv_stats()`
  snapshot taken on the engine thread (`refresh`).
"""

from __future__ import annotations

import logging
import os
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvspill.server.async_engine import AsyncEngine, RequestTimes
from kvspill.stats import KVStats
from kvspill.types import RequestOutput

logger = logging.getLogger(__name__)

P = "kvspill:"
_LAT = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)


class ServerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.running = Gauge(P + "num_requests_running", "Requests in the running batch", registry=r)
        self.waiting = Gauge(P + "num_requests_waiting", "Requests waiting to be scheduled", registry=r)
        self.usage = Gauge(P + "kv_cache_usage_perc", "Fraction of KV blocks in use", ["tier"], registry=r)
        self.blocks = Gauge(P + "kv_blocks", "KV blocks in use per tier", ["tier"], registry=r)
        self.moved = Gauge(
            P + "kv_moved_bytes_total", "KV bytes moved between tiers", ["src", "dst"], registry=r
        )
        self.cold = Gauge(P + "kv_cold_attention_seconds", "Seconds in cold attention", ["path"], registry=r)
        self.prefix_bytes = Gauge(
            P + "prefix_cache_bytes", "KV bytes findable by prefix hash per tier", ["tier"], registry=r
        )
        self.prefix_hit_rate = Gauge(
            P + "prefix_cache_hit_rate",
            "Prompt tokens found in the tier's prefix cache over tokens looked up, since start",
            ["tier"],
            registry=r,
        )
        self.preemptions = Gauge(P + "num_preemptions_total", "Preemptions since start", registry=r)
        self.demoted = Gauge(
            P + "prefix_cache_demoted_blocks_total",
            "Cached gpu blocks copied to the cpu tier's prefix cache when the gpu reused them",
            registry=r,
        )
        self.disk_errors = Gauge(
            P + "disk_tier_errors_total", "Failed reads and writes of the disk KV tier", ["op"], registry=r
        )
        self.rss = Gauge(P + "host_rss_bytes", "Resident memory of the server process", registry=r)
        self.gpu_mem = Gauge(P + "gpu_memory_used_bytes", "CUDA memory allocated by torch", registry=r)
        self.prompt_tokens = Counter(P + "prompt_tokens", "Prompt tokens processed", registry=r)
        self.gen_tokens = Counter(P + "generation_tokens", "Tokens generated", registry=r)
        self.success = Counter(P + "request_success", "Finished requests", ["finished_reason"], registry=r)
        self.rejected_c = Counter(P + "requests_rejected", "Requests refused", ["reason"], registry=r)
        self.ttft = Histogram(
            P + "time_to_first_token_seconds", "Time to first token", buckets=_LAT, registry=r
        )
        self.itl = Histogram(
            P + "inter_token_latency_seconds", "Time between tokens", buckets=_LAT, registry=r
        )
        self.e2e = Histogram(P + "e2e_request_latency_seconds", "Request latency", buckets=_LAT, registry=r)
        self.queue = Histogram(
            P + "request_queue_time_seconds", "Time before the first step", buckets=_LAT, registry=r
        )
        self.stats_errors = Counter(
            P + "stats_errors", "Scrapes whose engine statistics could not be read", registry=r
        )
        self._last: dict[str, float] = {}  # req_id -> time of its previous output (engine thread)

    def observe_output(self, out: RequestOutput, times: RequestTimes) -> None:
        """Called on the engine thread for each RequestOutput."""
        now = time.monotonic()
        prev = self._last.get(out.req_id)
        if prev is None:
            self.prompt_tokens.inc(out.num_prompt_tokens)
            self.ttft.observe(now - times.arrival)
            self.queue.observe((times.first_output or now) - times.arrival)
        elif out.delta_token_ids:
            self.itl.observe((now - prev) / len(out.delta_token_ids))
        self._last[out.req_id] = now
        self.gen_tokens.inc(len(out.delta_token_ids))
        if out.finished:
            self._last.pop(out.req_id, None)
            self.success.labels(out.finish_reason or "unknown").inc()
            self.e2e.observe(now - times.arrival)

    def forget(self, req_id: str) -> None:
        """A request ended without a finished output (aborted, failed): drop its entry."""
        self._last.pop(req_id, None)

    @property
    def num_tracked(self) -> int:
        return len(self._last)

    def rejected(self, reason: str) -> None:
        self.rejected_c.labels(reason).inc()

    async def scrape(self, ae: AsyncEngine) -> bytes:
        """The exposition text, gauges refreshed from the engine (if it is up). Statistics that
        cannot be read leave the gauges as they were; the error is logged and counted."""
        stats = None
        if ae.ready:
            try:
                stats = await ae.kv_stats()
            except Exception:  # noqa: BLE001 - the scrape still answers
                logger.exception("/metrics could not read the engine's statistics")
                self.stats_errors.inc()
        self.refresh(stats)
        return self.render()

    def refresh(self, kv: KVStats | None) -> None:
        if kv is not None:
            if kv.scheduler is not None:
                self.running.set(kv.scheduler.num_running)
                self.waiting.set(kv.scheduler.num_waiting)
                self.preemptions.set(kv.scheduler.num_preemptions)
                if kv.scheduler.kv_tiers is not None:
                    self.demoted.set(kv.scheduler.kv_tiers.num_demoted_prefix_blocks)
            for tier, usage in kv.tiers.items():
                self.blocks.labels(tier).set(usage.used_blocks)
                self.usage.labels(tier).set(usage.usage)
                self.prefix_bytes.labels(tier).set(usage.prefix_bytes)
                self.prefix_hit_rate.labels(tier).set(usage.prefix_hit_rate)
            for direction, value in kv.bytes_moved.items():
                src, _, dst = direction.partition("_to_")
                self.moved.labels(src, dst).set(value)
            for path, seconds in kv.cold_attention_seconds.to_json().items():
                self.cold.labels(path).set(seconds)
            self.disk_errors.labels("read").set(kv.runner.disk_read_errors)
            self.disk_errors.labels("write").set(kv.runner.disk_write_errors)
        try:
            import psutil

            self.rss.set(psutil.Process(os.getpid()).memory_info().rss)
        except (ImportError, OSError):
            pass
        self.gpu_mem.set(_gpu_memory())

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _gpu_memory() -> int:
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return 0
    return int(torch.cuda.memory_allocated())
