"""`kvspill bench serve`'s live line: loadgen reports every finished request (done/total, errors,
tokens), and the line is drawn on stderr once per tenth of the requests off a terminal, redrawn
in place (throttled) on one; stdout keeps only the table and the JSON."""

from __future__ import annotations

import asyncio
import json
import socket

from typer.testing import CliRunner

from kvspill.bench.loadgen import LoadConfig, LoadProgress, run_load
from kvspill.cli import bench_cmd


def _refused_url() -> str:
    with socket.socket() as s:  # bound but never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_every_finished_request_is_reported():
    seen: list[LoadProgress] = []
    cfg = LoadConfig(url=_refused_url(), concurrency=2, num_requests=5, model="m", timeout_s=5)
    summary = asyncio.run(run_load(cfg, on_progress=seen.append))
    assert [p.num_done for p in seen] == [1, 2, 3, 4, 5] and {p.num_total for p in seen} == {5}
    assert seen[-1].num_errors == summary["errors"] == 5 and seen[-1].output_tokens == 0
    assert all(b.elapsed_s >= a.elapsed_s for a, b in zip(seen, seen[1:], strict=False))


def test_the_line_and_its_pacing(capsys):
    assert LoadProgress(12, 40, 1, 1046, 2.0).line() == "requests 12/40 (1 errors), 523.0 tok/s, 2.0 s"
    log = bench_cmd.LiveLine(tty=False)
    for done in range(1, 21):
        log(LoadProgress(done, 20, 0, 10 * done, 0.1 * done))
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(",")[0] for ln in lines] == [f"requests {2 * i}/20 (0 errors)" for i in range(1, 11)]
    live = bench_cmd.LiveLine(tty=True, min_interval_s=3600)
    for done in range(1, 6):
        live(LoadProgress(done, 5, 0, done, 1.0))
    err = capsys.readouterr().err
    assert err.count("\r") == 2 and err.endswith("\n")  # the first draw, then the last
    assert "requests 5/5" in err and "requests 3/5" not in err


def test_bench_serve_draws_it_on_stderr(bench_app):
    app = bench_app()
    result = CliRunner().invoke(
        app, ["bench", "serve", "--url", _refused_url(), "--num-requests", "3", "--model", "m"]
    )
    assert result.exit_code == 1
    assert "requests 3/3 (3 errors)" in result.stderr and "/3 (" not in result.stdout
    assert json.loads(result.stdout.strip().splitlines()[-1])["errors"] == 3
