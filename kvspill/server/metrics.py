"""Prometheus metrics: kvspill's series (`kvspill:`) and vLLM's names beside them (`vllm_metrics.py`).

Invariants:
- One `CollectorRegistry` per app (tests can run several apps in one process).
- Every series carries `model_name`, the served model name (the label vLLM's dashboards select
  on).
- Request counters and histograms are fed from the engine thread's per-output callback
  (`observe_output`, each figure computed once for both prefixes) and from the HTTP layer
  (`rejected`); gauges are refreshed at scrape time from a `kv_stats()` snapshot taken on the
  engine thread (`refresh`).
- Totals the engine keeps (bytes moved, preemptions, demotions, disk errors, prefix-cache lookups)
  are counters read from that snapshot at collect time (`EngineTotals`), never re-counted here.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from kvspill.server.async_engine import AsyncEngine, RequestTimes
from kvspill.server.vllm_metrics import VllmMetrics
from kvspill.stats import KVStats
from kvspill.types import RequestOutput

logger = logging.getLogger(__name__)

P = "kvspill:"
_LAT = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
M = "model_name"


class EngineTotals(Collector):
    """Counters whose totals the engine keeps, yielded at each collect as `CounterMetricFamily`s
    built from the latest `KVStats` (a `Counter` only goes up by `inc`: setting it to the engine's
    total would mean differencing snapshots). The exposition types them `counter`, samples
    `<name>_total`. Nothing before the first snapshot; a failed read keeps the previous one."""

    def __init__(self, families: Callable[[KVStats], Iterable[CounterMetricFamily]]) -> None:
        self._families = families
        self._stats: KVStats | None = None  # replaced whole: one collect reads one snapshot

    def update(self, stats: KVStats) -> None:
        self._stats = stats

    def collect(self) -> Iterable[CounterMetricFamily]:
        stats = self._stats
        return [] if stats is None else list(self._families(stats))


def _counter_family(
    name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)  # `name` ends in _total: kept as the sample's
    for values, total in rows:
        family.add_metric(values, total)
    return family


def kvspill_totals(kv: KVStats, model: str) -> Iterator[CounterMetricFamily]:
    """The engine's totals under kvspill's names (HELP as when they were gauges)."""
    moved = [((model, *_src_dst(direction)), float(v)) for direction, v in kv.bytes_moved.items()]
    yield _counter_family(
        P + "kv_moved_bytes_total", "KV bytes moved between tiers", (M, "src", "dst"), moved
    )
    cold = [((model, path), s) for path, s in kv.cold_attention_seconds.to_json().items()]
    yield _counter_family(
        P + "kv_cold_attention_seconds_total", "Seconds in cold attention", (M, "path"), cold
    )
    errors = [((model, "read"), kv.runner.disk_read_errors), ((model, "write"), kv.runner.disk_write_errors)]
    yield _counter_family(
        P + "disk_tier_errors_total", "Failed reads and writes of the disk KV tier", (M, "op"), errors
    )
    if kv.scheduler is not None:
        preemptions = [((model,), kv.scheduler.num_preemptions)]
        yield _counter_family(P + "num_preemptions_total", "Preemptions since start", (M,), preemptions)
        demoted = [((model,), kv.scheduler.kv_tiers.num_demoted_prefix_blocks)]
        yield _counter_family(
            P + "prefix_cache_demoted_blocks_total",
            "Cached gpu blocks copied to the cpu tier's prefix cache when the gpu reused them",
            (M,),
            demoted,
        )


def _src_dst(direction: str) -> tuple[str, str]:
    """A direction as the runner names it, "gpu_to_cpu", as ("gpu", "cpu")."""
    src, _, dst = direction.partition("_to_")
    return src, dst


class ServerMetrics:
    def __init__(self, model_name: str) -> None:
        r = self.registry = CollectorRegistry()
        m = self.model_name = model_name
        self.vllm = VllmMetrics(r, m)
        self.totals = EngineTotals(lambda kv: chain(kvspill_totals(kv, m), self.vllm.totals(kv)))
        r.register(self.totals)
        self.running = _gauge(r, "num_requests_running", "Requests in the running batch", m)
        self.waiting = _gauge(r, "num_requests_waiting", "Requests waiting to be scheduled", m)
        self.usage = Gauge(P + "kv_cache_usage_perc", "Fraction of KV blocks in use", [M, "tier"], registry=r)
        self.blocks = Gauge(P + "kv_blocks", "KV blocks in use per tier", [M, "tier"], registry=r)
        self.prefix_bytes = Gauge(
            P + "prefix_cache_bytes", "KV bytes findable by prefix hash per tier", [M, "tier"], registry=r
        )
        self.prefix_hit_rate = Gauge(
            P + "prefix_cache_hit_rate",
            "Prompt tokens found in the tier's prefix cache over tokens looked up, since start",
            [M, "tier"],
            registry=r,
        )
        self.rss = _gauge(r, "host_rss_bytes", "Resident memory of the server process", m)
        self.gpu_mem = _gauge(r, "gpu_memory_used_bytes", "CUDA memory allocated by torch", m)
        self.prompt_tokens = _counter(r, "prompt_tokens", "Prompt tokens processed", m)
        self.gen_tokens = _counter(r, "generation_tokens", "Tokens generated", m)
        self.success = Counter(P + "request_success", "Finished requests", [M, "finished_reason"], registry=r)
        self.rejected_c = Counter(P + "requests_rejected", "Requests refused", [M, "reason"], registry=r)
        self.kv_ops = Counter(
            P + "kv_cache_ops", "Cache management calls (/v1/kv/*) by operation and HTTP status",
            [M, "op", "status"], registry=r,
        )  # fmt: skip
        self.stats_errors = _counter(
            r, "stats_errors", "Scrapes whose engine statistics could not be read", m
        )
        self.ttft = _histogram(r, "time_to_first_token_seconds", "Time to first token", m)
        self.itl = _histogram(r, "inter_token_latency_seconds", "Time between tokens", m)
        self.e2e = _histogram(r, "e2e_request_latency_seconds", "Request latency", m)
        # The engine does not report when it first schedules a request: this is arrival to the
        # first output, the end of the step that produced it.
        self.queue = _histogram(r, "request_queue_time_seconds", "Time from arrival to the first output", m)
        self._last: dict[str, float] = {}  # req_id -> time of its previous output (engine thread)

    def observe_output(self, out: RequestOutput, times: RequestTimes) -> None:
        """Called on the engine thread for each RequestOutput."""
        now = time.monotonic()
        prev = self._last.get(out.req_id)
        itl = None
        if prev is None:
            ttft = now - times.arrival
            self.prompt_tokens.inc(out.num_prompt_tokens)
            self.ttft.observe(ttft)
            self.queue.observe((times.first_output or now) - times.arrival)
            self.vllm.first_output(out.num_prompt_tokens, ttft)
        elif out.delta_token_ids:
            itl = (now - prev) / len(out.delta_token_ids)
            self.itl.observe(itl)
        self._last[out.req_id] = now
        self.gen_tokens.inc(len(out.delta_token_ids))
        self.vllm.tokens(len(out.delta_token_ids), itl)
        if out.finished:
            self._last.pop(out.req_id, None)
            reason = out.finish_reason or "unknown"
            self.success.labels(self.model_name, reason).inc()
            self.e2e.observe(now - times.arrival)
            decode = now - (times.first_output or now)
            self.vllm.finished(
                reason, now - times.arrival, decode, out.num_prompt_tokens, out.num_output_tokens
            )

    def forget(self, req_id: str, how: str = "finished") -> None:
        """A request left the engine (`how`: async_engine's on_end): drop its entry; one that
        ended without a finished output (aborted by its client or shutdown, failed in a step)
        counts as finished for that reason ("abort", "error"), as vLLM's finished_reason."""
        self._last.pop(req_id, None)
        if how != "finished":
            self.success.labels(self.model_name, how).inc()
            self.vllm.ended_without_output(how)

    @property
    def num_tracked(self) -> int:
        return len(self._last)

    def rejected(self, reason: str) -> None:
        self.rejected_c.labels(self.model_name, reason).inc()

    def kv_op(self, op: str, status: int) -> None:
        """One `/v1/kv/*` call (prefixes, lookup, pin, unpin, move, clear) and how it ended."""
        self.kv_ops.labels(self.model_name, op, str(status)).inc()

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
            self.totals.update(kv)
            self.vllm.refresh(kv)
            if kv.scheduler is not None:
                self.running.set(kv.scheduler.num_running)
                self.waiting.set(kv.scheduler.num_waiting)
            for tier, usage in kv.tiers.items():
                self.blocks.labels(self.model_name, tier).set(usage.used_blocks)
                self.usage.labels(self.model_name, tier).set(usage.usage)
                self.prefix_bytes.labels(self.model_name, tier).set(usage.prefix_bytes)
                self.prefix_hit_rate.labels(self.model_name, tier).set(usage.prefix_hit_rate)
        try:
            import psutil

            self.rss.set(psutil.Process(os.getpid()).memory_info().rss)
        except (ImportError, OSError):
            pass
        self.gpu_mem.set(_gpu_memory())

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _gauge(registry: CollectorRegistry, name: str, doc: str, model: str) -> Gauge:
    return Gauge(P + name, doc, [M], registry=registry).labels(model)


def _counter(registry: CollectorRegistry, name: str, doc: str, model: str) -> Counter:
    return Counter(P + name, doc, [M], registry=registry).labels(model)


def _histogram(registry: CollectorRegistry, name: str, doc: str, model: str) -> Histogram:
    return Histogram(P + name, doc, [M], buckets=_LAT, registry=registry).labels(model)


def _gpu_memory() -> int:
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return 0
    return int(torch.cuda.memory_allocated())
