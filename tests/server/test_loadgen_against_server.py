"""`kvspill bench serve` against the real tiny-model server, and against a refused port."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvspill.bench.loadgen import LoadConfig, make_prompts, percentile
from kvspill.cli import bench_cmd


def _refused_url() -> str:
    with socket.socket() as s:  # bound but never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def run_bench(bench_app) -> Callable[..., tuple[int, dict[str, Any], str]]:
    """Run `bench serve ARGS...`; returns (exit code, the summary JSON line, stdout)."""

    def invoke(*args: str) -> tuple[int, dict[str, Any], str]:
        app = bench_app()
        bench_cmd.register(app)  # idempotent
        assert [g.name for g in app.registered_groups] == ["bench"]
        result = CliRunner().invoke(app, ["bench", "serve", *args])
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        assert lines, result.output
        return result.exit_code, json.loads(lines[-1]), result.stdout

    return invoke


def _ordered(stats: dict[str, float | None]) -> None:
    p50, p90, p99 = stats["p50"], stats["p90"], stats["p99"]
    assert p50 is not None and p90 is not None and p99 is not None
    assert 0 < p50 <= p90 <= p99


def test_bench_serve_reports_latencies(server: Any, tmp_path: Path, run_bench) -> None:
    out = tmp_path / "bench.jsonl"
    code, summary, text = run_bench(
        "--url",
        server.url,
        "--concurrency",
        "4",
        "--num-requests",
        "8",
        "--prompt-len",
        "16",
        "--max-tokens",
        "8",
        "--out",
        str(out),
    )
    assert code == 0, text
    assert summary["requests"] == 8 and summary["successes"] == 8 and summary["errors"] == 0
    assert summary["error_kinds"] == {}
    assert summary["output_tokens_per_request"] == [8] * 8
    assert summary["prompt_tokens"] == 8 * 16
    assert summary["model"] == server.model
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        _ordered(summary[name])
    assert summary["output_tokens_per_s"] > 0 and summary["request_throughput"] > 0
    assert "ttft_ms" in text and "tok/s" in text
    assert json.loads(out.read_text().splitlines()[-1]) == summary


def test_bench_serve_refused_port_reports_errors(run_bench) -> None:
    url = _refused_url()
    code, summary, text = run_bench(
        "--url", url, "--concurrency", "2", "--prompt-len", "4", "--max-tokens", "2"
    )
    assert code == 1, text
    assert summary["requests"] == 8 and summary["successes"] == 0 and summary["errors"] == 8
    assert summary["error_kinds"] == {"connect": 8}
    assert summary["ttft_ms"]["p50"] is None
    assert summary["warnings"] and "/v1/models" in summary["warnings"][0]


def test_prompts_and_percentiles() -> None:
    cfg = LoadConfig(url="http://x", concurrency=3, prompt_len=16, seed=7)
    prompts = make_prompts(cfg)
    assert len(prompts) == 12 and all(len(p) == 16 for p in prompts)
    assert prompts == make_prompts(cfg)
    assert all(5 <= t <= 255 for p in prompts for t in p)
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
