"""vLLM's Grafana dashboard works against kvspill unchanged: every `vllm:` series its PromQL reads
is in a kvspill server's /metrics after a few requests, with the type the expression needs
(`_bucket` a histogram, `_total` a counter, a bare name a gauge), the `model_name` label the
dashboard selects on, the labels it groups by, and data in it.

The expressions are the dashboard's, vendored with source, commit and license in
tests/data/vllm_grafana_dashboard_exprs.json. What kvspill cannot back honestly is in SKIPPED with
the reason (docs/metrics.md lists the same) and must stay absent rather than be faked."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvspill.server import ServerSettings

from ..fault.conftest import AppServer, serve_in_thread, stop_in_thread, tiny_engine_factory

DASHBOARD = Path(__file__).parents[1] / "data" / "vllm_grafana_dashboard_exprs.json"
SERVED = "tiny-served"
SKIPPED = {
    "vllm:request_queue_time_seconds": "the engine does not report when it first schedules a request",
    "vllm:request_prefill_time_seconds": "starts when the request is first scheduled: not reported either",
    "vllm:request_max_num_generation_tokens": "the max over an n>1 group; the engine runs each completion alone",
}
_SERIES = re.compile(r"vllm:[A-Za-z0-9_:]+")
_BY = re.compile(r"\bby\s*\(([^)]*)\)")
_SUFFIX_TYPE = (
    ("_bucket", "histogram"),
    ("_sum", "histogram"),
    ("_count", "histogram"),
    ("_total", "counter"),
)


def dashboard_needs() -> dict[str, tuple[str, set[str]]]:
    """Family name -> (Prometheus type, labels grouped by) for every `vllm:` series the
    dashboard's expressions read."""
    needs: dict[str, tuple[str, set[str]]] = {}
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for expr in panel["exprs"]:
            grouped = {label.strip() for by in _BY.findall(expr) for label in by.split(",")} - {"le"}
            for series in _SERIES.findall(expr):
                family, kind = series, "gauge"
                for suffix, suffix_kind in _SUFFIX_TYPE:
                    if series.endswith(suffix):
                        family, kind = series.removesuffix(suffix), suffix_kind
                        break
                _, labels = needs.setdefault(family, (kind, set()))
                labels |= grouped
    return needs


@pytest.fixture(scope="module")
def scraped(tiny_llama_dir: Path) -> Iterator[dict]:
    """The real app and engine in this process (no server process to start: seconds saved)."""
    server = serve_in_thread(tiny_engine_factory(tiny_llama_dir), ServerSettings(SERVED))
    try:
        yield _scrape_after_requests(server)
    finally:
        stop_in_thread(server)


def _scrape_after_requests(server: AppServer) -> dict:
    prompt = "the cat sat on the mat " * 12  # long enough for full KV blocks: the repeat hits the cache
    for max_tokens in (3, 4, 3):
        body = {"model": SERVED, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
        assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_dashboard_reads_something() -> None:
    needs = dashboard_needs()
    assert len(needs) >= 10 and "vllm:time_to_first_token_seconds" in needs
    assert needs["vllm:request_success"] == ("counter", {"finished_reason"})
    assert set(SKIPPED) <= set(needs), "SKIPPED names a series the dashboard does not read"


@pytest.mark.parametrize("family", sorted(dashboard_needs()))
def test_every_dashboard_series_exists_with_its_type_and_labels(scraped: dict, family: str) -> None:
    if family in SKIPPED:
        assert family not in scraped, f"{family} is exported: take it out of SKIPPED"
        pytest.skip(f"{family}: {SKIPPED[family]}")
    kind, grouped = dashboard_needs()[family]
    assert family in scraped, f"/metrics has no {family}"
    metric = scraped[family]
    assert metric.type == kind
    assert metric.samples and all(s.labels.get("model_name") == SERVED for s in metric.samples)
    assert all(grouped <= set(s.labels) for s in metric.samples)
    if kind == "histogram":
        count = next(s.value for s in metric.samples if s.name == family + "_count")
        assert count > 0, f"{family} observed nothing after three requests"
        assert any(s.name == family + "_bucket" for s in metric.samples)
    elif kind == "counter":
        assert sum(s.value for s in metric.samples if s.name == family + "_total") > 0


def test_vllm_names_beyond_the_dashboard(scraped: dict) -> None:
    """The other vLLM series kvspill backs: the pre-0.9 KV usage name, prefix cache lookups in
    tokens (the repeated prompt hit), preemptions."""
    assert scraped["vllm:gpu_cache_usage_perc"].type == "gauge"
    value = {name: scraped[name].samples[0].value for name in scraped if name.startswith("vllm:prefix_cache")}
    assert scraped["vllm:prefix_cache_queries"].type == "counter" and value["vllm:prefix_cache_queries"] > 0
    assert 0 < value["vllm:prefix_cache_hits"] <= value["vllm:prefix_cache_queries"]
    assert scraped["vllm:num_preemptions"].type == "counter"


def test_every_kvspill_series_carries_model_name(scraped: dict) -> None:
    unlabelled = [s.name for f in scraped.values() for s in f.samples if s.labels.get("model_name") != SERVED]
    assert unlabelled == []
    assert any(name.startswith("kvspill:") for name in scraped)
