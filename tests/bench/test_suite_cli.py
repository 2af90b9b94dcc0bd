"""`kvspill bench progressive | compare | stability` end to end on the tiny Llama (CPU, fp32):
the results folder has the rows we asked for, the exit codes follow the verdicts, bad input says
what to change; and the same suites against a real server (`--url`)."""

from __future__ import annotations

import csv
import json
import socket
from pathlib import Path

import pytest

from kvspill.cli import bench_suites_cmd

ENGINE = ("--device", "cpu", "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "8")


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _csv(out: Path) -> list[dict]:
    with (out / "results.csv").open() as f:
        return list(csv.DictReader(f))


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _refused_url() -> str:
    with socket.socket() as s:  # bound but never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_progressive_writes_one_row_per_context(bench, tiny_llama_dir, tmp_path):
    out = tmp_path / "prog"
    result = bench(
        "progressive",
        "--model",
        str(tiny_llama_dir),
        *ENGINE,
        "--contexts",
        "32,64,128",
        "--new-tokens",
        "4",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    assert [r["ctx"] for r in rows] == [32, 64, 128] and all(r["ok"] for r in rows)
    for r in rows:
        assert r["new_tokens"] == 4 and r["ttft_s"] > 0 and r["decode_tok_s"] > 0
        assert r["peak_gpu_gib"] is None and r["host_rss_gib"] > 0 and r["bytes_moved"] == 0
        assert r["suite"] == "progressive" and r["mode"] == "device-kv" and r["system"].startswith("kvspill-")
    assert [r["ctx"] for r in _csv(out)] == ["32", "64", "128"]
    assert _is_png(out / "progressive.png")
    report = (out / "report.md").read_text()
    assert "largest stable context: 128 tokens" in report and "--contexts 32,64,128" in report
    assert "largest stable context: 128 tokens" in result.output


def test_compare_writes_a_row_per_config_and_context(bench, tiny_llama_dir, tmp_path):
    out = tmp_path / "cmp"
    configs = ["default", "offload-on", "cpu-attention"]
    result = bench(
        "compare",
        "--model",
        str(tiny_llama_dir),
        *ENGINE,
        "--configs",
        ",".join(configs),
        "--contexts",
        "32,96",
        "--new-tokens",
        "4",
        "--tier-cap",
        "1MiB",
        "--no-warmup",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    assert [(r["config"], r["ctx"]) for r in rows] == [(c, x) for c in configs for x in (32, 96)]
    assert all(r["ok"] and r["decode_tok_s"] > 0 for r in rows), rows
    assert [(r["config"], r["ctx"]) for r in _csv(out)] == [(c, x) for c in configs for x in ("32", "96")]
    assert _is_png(out / "compare.png")
    report = (out / "report.md").read_text()
    assert all(f"| {c} |" in report for c in configs)
    # the mode, and offload-on's CPU tier: one sequence of --max-model-len 512 (768 bytes a token)
    assert "'mode': 'default'" in report and "384 KiB" in report


def test_stability_passes_in_process(bench, tiny_llama_dir, tmp_path):
    out = tmp_path / "stab"
    result = bench(
        "stability",
        "--model",
        str(tiny_llama_dir),
        *ENGINE,
        "--duration",
        "8",  # the trend test needs 4 waves: 3 s gave 1-2 on a loaded 2-core machine
        "--concurrency",
        "3",
        "--context-range",
        "16:64",
        "--new-tokens",
        "4",
        "--max-rss-growth",
        "256MiB",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    rows = _rows(out)
    assert rows and all(r["ok"] and 16 <= r["ctx"] <= 64 for r in rows)
    assert (out / "samples.csv").is_file() and _is_png(out / "stability.png")


def test_stability_fails_when_requests_error(bench, tmp_path):
    out = tmp_path / "down"
    result = bench(
        "stability",
        "--url",
        _refused_url(),
        "--duration",
        "30",
        "--context-range",
        "16:32",
        "--out",
        str(out),
    )
    assert result.exit_code == 1, result.output
    rows = _rows(out)
    assert rows and all(not r["ok"] and r["err"] == "connect" for r in rows)
    assert "FAIL" in (out / "report.md").read_text()


def test_progressive_exits_1_when_the_first_context_fails(bench, scripted, monkeypatch, tmp_path):
    target = scripted(fail=lambda spec, n: "OutOfKVMemoryError: no room")
    monkeypatch.setattr(bench_suites_cmd, "_target", lambda url, api_key, model, engine: target)
    result = bench("progressive", "--contexts", "64,128", "--new-tokens", "4", "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert [r["ctx"] for r in _rows(tmp_path)] == [64] and target.closed
    assert "FAILED at the first context" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("compare", "--contexts", "600"), "--max-model-len"),
        (("compare", "--configs", "default,turbo"), "unknown configuration 'turbo'"),
        (("compare", "--configs", ""), "--configs is empty"),
        (("progressive", "--contexts", "128,64"), "ascending"),
        (("stability", "--context-range", "64:16"), "1 <= MIN <= MAX"),
    ],
)
def test_bad_input_exits_2_with_what_to_change(bench, tiny_llama_dir, tmp_path, args, message):
    result = bench(*args, "--model", str(tiny_llama_dir), *ENGINE, "--out", str(tmp_path / "x"))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x").exists()


def test_suites_against_a_server(bench, tiny_server, tmp_path):
    out = tmp_path / "prog"
    result = bench(
        "progressive", "--url", tiny_server, "--contexts", "16,48", "--new-tokens", "4", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    assert [r["ctx"] for r in rows] == [16, 48] and all(r["ok"] and r["new_tokens"] == 4 for r in rows)
    assert all(r["host_rss_gib"] > 0 and r["mode"] == "url" for r in rows)  # from the server's /metrics
    out = tmp_path / "cmp"
    result = bench(
        "compare",
        "--url",
        f"a={tiny_server}",
        "--url",
        f"b={tiny_server}",
        "--contexts",
        "16,32",
        "--new-tokens",
        "3",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert [(r["config"], r["ctx"], r["ok"]) for r in _rows(out)] == [
        ("a", 16, True),
        ("a", 32, True),
        ("b", 16, True),
        ("b", 32, True),
    ]
    result = bench("progressive", "--url", tiny_server, "--contexts", "1024", "--out", str(tmp_path / "long"))
    assert result.exit_code == 2 and "512" in result.output  # the server's max_model_len from /v1/models
