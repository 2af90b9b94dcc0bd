"""`kvspill bench all` on the tiny Llama (CPU, fp32): one folder, one report with the three plots,
the three summaries kept in the registry and listed by `bench history`; seed 001's A/B offload
configurations refused on the CPU before anything starts; a registry that cannot be written is a
warning, never a failed run."""

from __future__ import annotations

import json
from pathlib import Path

from kvspill.cli import bench_suites_cmd

ENGINE = ("--device", "cpu", "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "8")


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_all_writes_one_report_and_keeps_every_summary(bench, tiny_llama_dir, tmp_path):
    out = tmp_path / "all"
    result = bench(
        "all", "--model", str(tiny_llama_dir), *ENGINE, "--contexts", "32,64", "--new-tokens", "2",
        "--duration", "8", "--concurrency", "1", "--context-range", "16:32", "--max-rss-growth", "256MiB",  # 4 waves: 3 s gave 2 on a loaded 2-core machine
        "--configs", "offload-off,cpu-attention", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for suite in ("progressive", "stability", "compare"):
        assert _is_png(out / suite / f"{suite}.png") and (out / suite / "results.jsonl").is_file()
    report = (out / "report.md").read_text()
    assert "**PASS**" in report and "largest stable context: 64 tokens" in report
    for png in ("progressive/progressive.png", "stability/stability.png", "compare/compare.png"):
        assert f"]({png})" in report
    assert "| offload-off | 2/2 |" in report and "| cpu-attention | 2/2 |" in report  # compare ran 32 and 64
    listed = bench("history", "--json")
    results = json.loads(listed.output)["results"]
    assert sorted(r["suite"] for r in results) == ["compare", "progressive", "stability"]
    assert {r["model"] for r in results} == {str(tiny_llama_dir)}
    by_suite = {r["suite"]: r for r in results}
    assert (
        by_suite["progressive"]["passed"] is True
        and by_suite["progressive"]["figures"]["largest_stable_ctx"] == 64
    )
    assert by_suite["stability"]["passed"] is True and by_suite["stability"]["figures"]["errors"] == 0
    arms = by_suite["compare"]["figures"]["configs"]
    assert set(arms) == {"offload-off", "cpu-attention"} and by_suite["compare"]["passed"] is None
    for arm in arms.values():  # the A/B table: load time, throughput, latency, total
        assert 0 < arm["load_s"] < arm["total_s"] and arm["decode_tok_s"] > 0 and arm["ttft_s"] > 0
    assert by_suite["compare"]["out_dir"] == str((out / "compare").resolve())
    text = bench("history", "--model", str(tiny_llama_dir), "--suite", "progressive").output
    assert text.count("\n") == 1 and "largest stable 64 tok" in text and "pass" in text


def test_weights_offload_is_refused_on_the_cpu_before_anything_runs(bench, tiny_llama_dir, tmp_path):
    for command in ("compare", "all"):
        out = tmp_path / command
        result = bench(
            command, "--model", str(tiny_llama_dir), *ENGINE, "--configs", "weights-resident,weights-offload",
            "--contexts", "32", "--out", str(out),
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert (
            "weights-offload needs a CUDA device" in result.output
            and "drop it from --configs" in result.output
        )
        assert not out.exists()


def test_a_registry_that_cannot_be_written_is_a_warning(bench, scripted, monkeypatch, tmp_path):
    monkeypatch.setattr(bench_suites_cmd, "_target", lambda url, api_key, model, engine: scripted())
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    args = ("progressive", "--contexts", "64,128", "--new-tokens", "4", "--out", str(tmp_path / "p"))
    result = bench(*args, "--data-dir", str(blocked / "registry"))
    assert result.exit_code == 0, result.output
    assert "warning: the progressive summary was not kept" in result.output
    assert "largest stable context: 128 tokens" in result.output
    kept = bench(*args)  # into the test's registry folder
    assert "kept as result 1" in kept.output
    assert "largest stable 128 tok" in bench("history").output
    assert "kept as" not in bench(*args, "--no-keep").output
    assert len(json.loads(bench("history", "--json").output)["results"]) == 1
