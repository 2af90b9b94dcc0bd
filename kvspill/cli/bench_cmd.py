"""`kvspill bench`: `serve` loads a running OpenAI-compatible server and reports latency and
throughput; `progressive`, `stability` and `compare` are the suites (`bench_suites_cmd.py`).

Prints a plain table (TTFT, inter-token latency and end-to-end latency as mean/p50/p90/p99 in
ms, request and output-token throughput, errors by kind) and then the same summary as one JSON
object; `--out FILE` also appends that object as one line. Exits 1 when any request failed.
While the load runs, a live line on stderr: requests done/total, errors, output tok/s so far.

Invariants:
- `bench serve` never imports torch or the engine: only `kvspill.bench.loadgen` (and, lazily, httpx).
- Failed requests are reported, never raised: a refused port gives a report and exit 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)


@bench_app.callback()
def _bench() -> None:
    """Benchmarks: a load test against a server, and the progressive/stability/compare suites."""


class LiveLine:
    """`bench serve`'s progress on stderr (stdout keeps the table and the JSON): on a terminal one
    line redrawn in place, at most every `min_interval_s`; elsewhere (a CI log, a pipe) a line at
    each tenth of the requests, so a log does not fill with redraws."""

    def __init__(self, tty: bool, min_interval_s: float = 0.2) -> None:
        self.tty, self.min_interval_s = tty, min_interval_s
        self._last_draw = float("-inf")  # the first progress always draws (monotonic() may be near 0)
        self._last_tenth = 0

    def __call__(self, progress: Any) -> None:  # a loadgen.LoadProgress
        finished = progress.num_done >= progress.num_total
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < self.min_interval_s and not finished:
                return
            self._last_draw = now
            typer.echo("\r" + progress.line() + "  ", err=True, nl=finished)
            return
        tenth = progress.num_done * 10 // max(progress.num_total, 1)
        if tenth > self._last_tenth:
            self._last_tenth = tenth
            typer.echo(progress.line(), err=True)


@bench_app.command("serve")
def serve(
    url: Annotated[str, typer.Option(envvar="KVSPILL_URL", help="The server.")] = "http://127.0.0.1:8000",
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight at once.")] = 1,
    num_requests: Annotated[
        int | None, typer.Option(min=1, help="Requests in all (default: 4 x concurrency).")
    ] = None,
    prompt_len: Annotated[int, typer.Option(min=1, help="Prompt tokens per request (random ids).")] = 128,
    max_tokens: Annotated[int, typer.Option(min=1, help="Output tokens per request.")] = 128,
    model: Annotated[
        str | None, typer.Option(help="Model name (default: the first from /v1/models).")
    ] = None,
    api_key: Annotated[str | None, typer.Option(envvar="KVSPILL_API_KEY", help="Bearer token.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random prompts.")] = 0,
    max_token_id: Annotated[int, typer.Option(min=5, help="Largest random prompt token id.")] = 255,
    timeout: Annotated[float, typer.Option(help="Per-request timeout in seconds.")] = 300.0,
    out: Annotated[Path | None, typer.Option(help="Append the JSON summary to this file (one line).")] = None,
    json_schema: Annotated[
        Path | None,
        typer.Option(help="A JSON schema file every request's output must match (guided decoding)."),
    ] = None,
) -> None:
    """Send streaming completions at a fixed concurrency; report TTFT, ITL, E2E, tokens/s and errors."""
    from kvspill.bench.loadgen import LoadConfig, format_table, run_load

    cfg = LoadConfig(
        url=url,
        concurrency=concurrency,
        num_requests=num_requests,
        prompt_len=prompt_len,
        max_tokens=max_tokens,
        model=model,
        api_key=api_key,
        seed=seed,
        max_token_id=max_token_id,
        timeout_s=timeout,
        json_schema=json.loads(json_schema.read_text(encoding="utf-8")) if json_schema is not None else None,
    )
    summary = asyncio.run(run_load(cfg, on_progress=LiveLine(sys.stderr.isatty())))
    typer.echo(format_table(summary))
    line = json.dumps(summary)
    typer.echo(line)
    if out is not None:
        with out.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
    if summary["errors"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `bench` group to the `kvspill` app (idempotent; called by cli/main.py)."""
    from kvspill.cli import bench_suites_cmd

    bench_suites_cmd.register(bench_app)
    if not any(g.name == "bench" for g in app.registered_groups):
        app.add_typer(bench_app, name="bench")
