"""vLLM's metric names (`vllm:`), beside kvspill's own, so that a vLLM Grafana dashboard works as is.

Names, types, label names (`model_name`, `engine`) and histogram buckets are vLLM's
(vllm/v1/metrics/loggers.py, `PrometheusStatLogger`); `engine` is always "0" (one engine per
server). Only quantities kvspill measures are exported; what vLLM's dashboard shows that kvspill
cannot back (queue time, prefill time, the n-group's generation tokens) is left out and listed in
docs/metrics.md.

Invariants:
- Every series carries `model_name` = the served model name and `engine` = "0".
- Request series are fed by `ServerMetrics` (engine thread) with the figures it computes once for
  both prefixes; gauges by `refresh` at scrape time; the engine's totals (preemptions, prefix-cache
  lookups) by `totals`, which `ServerMetrics`' collector yields as counters.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

from kvspill.stats import KVStats

V = "vllm:"
LABELS = ("model_name", "engine")
ENGINE = "0"
FINISH_REASONS = ("stop", "length", "abort", "error")  # RequestOutput.finish_reason's values

# vLLM's buckets (vllm/v1/metrics/loggers.py): its dashboard's quantiles are read from them.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def one_two_five_buckets(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's `build_1_2_5_buckets`)."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(buckets)
            buckets.append(mantissa * scale)
        scale *= 10


# vLLM sizes these by max_model_len, which the engine learns after the app is built; 1-2-5 up to
# 10M tokens covers every context kvspill serves (a heatmap reads whatever buckets there are).
TOKEN_BUCKETS = one_two_five_buckets(10_000_000)


class VllmMetrics:
    """The `vllm:` series of one server, registered on `registry`."""

    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        r = registry
        ids = self._ids = (model_name, ENGINE)
        self.running = _gauge(
            r, "num_requests_running", "Number of requests in model execution batches.", ids
        )
        self.waiting = _gauge(r, "num_requests_waiting", "Number of requests waiting to be processed.", ids)
        self.kv_usage = _gauge(
            r, "kv_cache_usage_perc", "KV-cache usage (gpu tier). 1 means 100 percent usage.", ids
        )
        # vLLM's name before 0.9, which older dashboards still query
        self.gpu_usage = _gauge(
            r,
            "gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage. "
            "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            ids,
        )
        self.prompt_tokens = _counter(r, "prompt_tokens", "Number of prefill tokens processed.", ids)
        self.gen_tokens = _counter(r, "generation_tokens", "Number of generation tokens processed.", ids)
        self._success = Counter(
            V + "request_success",
            "Count of successfully processed requests.",
            (*LABELS, "finished_reason"),
            registry=r,
        )
        for reason in FINISH_REASONS:  # every reason's series from the start, at 0 (as vLLM does)
            self._success.labels(*ids, reason)
        self.ttft = _histogram(
            r,
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
            ids,
        )
        self.itl = _histogram(
            r, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS, ids
        )
        self.e2e = _histogram(
            r,
            "e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
            ids,
        )
        self.decode = _histogram(
            r,
            "request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request (first token to last).",
            REQUEST_LATENCY_BUCKETS,
            ids,
        )
        self.prompt_len = _histogram(
            r, "request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS, ids
        )
        self.gen_len = _histogram(
            r, "request_generation_tokens", "Number of generation tokens processed.", TOKEN_BUCKETS, ids
        )

    def first_output(self, num_prompt_tokens: int, ttft_s: float) -> None:
        self.prompt_tokens.inc(num_prompt_tokens)
        self.ttft.observe(ttft_s)

    def tokens(self, num_tokens: int, itl_s: float | None) -> None:
        """`num_tokens` new tokens of one request; `itl_s` per token (None on the first output)."""
        self.gen_tokens.inc(num_tokens)
        if itl_s is not None:
            self.itl.observe(itl_s)

    def finished(
        self, reason: str, e2e_s: float, decode_s: float, num_prompt: int, num_generated: int
    ) -> None:
        self._success.labels(*self._ids, reason).inc()
        self.e2e.observe(e2e_s)
        self.decode.observe(decode_s)
        self.prompt_len.observe(num_prompt)
        self.gen_len.observe(num_generated)

    def ended_without_output(self, reason: str) -> None:
        """A request aborted or failed before its last output: counted, not timed."""
        self._success.labels(*self._ids, reason).inc()

    def refresh(self, kv: KVStats) -> None:
        if kv.scheduler is not None:
            self.running.set(kv.scheduler.num_running)
            self.waiting.set(kv.scheduler.num_waiting)
            self.kv_usage.set(kv.scheduler.kv_cache_usage)
            self.gpu_usage.set(kv.scheduler.kv_cache_usage)

    def totals(self, kv: KVStats) -> Iterator[CounterMetricFamily]:
        """The engine's totals under vLLM's counter names (tokens for the prefix cache, as vLLM counts)."""
        if kv.scheduler is None:
            return
        for name, doc, value in (
            (
                "num_preemptions",
                "Cumulative number of preemption from the engine.",
                kv.scheduler.num_preemptions,
            ),
            (
                "prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                kv.scheduler.prefix_cache_queries,
            ),
            (
                "prefix_cache_hits",
                "Prefix cache hits (gpu tier), in terms of number of cached tokens.",
                kv.scheduler.prefix_cache_hits,
            ),
        ):
            family = CounterMetricFamily(V + name, doc, labels=LABELS)
            family.add_metric(self._ids, value)
            yield family


def _gauge(registry: CollectorRegistry, name: str, doc: str, ids: tuple[str, str]) -> Gauge:
    return Gauge(V + name, doc, LABELS, registry=registry).labels(*ids)


def _counter(registry: CollectorRegistry, name: str, doc: str, ids: tuple[str, str]) -> Counter:
    return Counter(V + name, doc, LABELS, registry=registry).labels(*ids)


def _histogram(
    registry: CollectorRegistry, name: str, doc: str, buckets: tuple[float, ...], ids: tuple[str, str]
) -> Histogram:
    return Histogram(V + name, doc, LABELS, buckets=buckets, registry=registry).labels(*ids)
