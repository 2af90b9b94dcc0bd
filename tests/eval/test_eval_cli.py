"""`kvspill eval` end to end on a tiny random Llama with SmolLM2's tokenizer: tasks, teacher-forced
agreement of cold-tier exact attention against all-hot KV, eval.json and eval.md, --combine."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvspill.cli import eval_cmd
from kvspill.cli.main import app

eval_cmd.register(app)
pytestmark = pytest.mark.slow  # a few engine runs of a tiny model: about 10 s of CPU


def _args(model_dir, out, tasks: tuple[str, ...], lengths: tuple[str, ...], *extra: str) -> list[str]:
    return [
        "eval", "-m", str(model_dir), "--lengths", *lengths, "--samples", "1",
        *(x for t in tasks for x in ("--tasks", t)), "--out", str(out),
        "--device", "cpu", "--dtype", "float32", *extra,
    ]  # fmt: skip


def test_eval_writes_json_and_markdown(tiny_smol_vocab_dir, tmp_path):
    out = tmp_path / "cold"
    cold = ("--label", "cold", "--hot-kv-tokens", "64", "--engine-arg", "cold_attention=cpu")
    tasks = ("passkey", "niah_multikey")
    result = CliRunner().invoke(app, _args(tiny_smol_vocab_dir, out, tasks, ("256", "384"), *cold))
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "eval.json").read_text())
    assert doc["engine_args"]["cold_attention"] == "cpu" and doc["engine_args"]["num_kv_blocks"] == 11
    assert "cold_attention" not in doc["reference_engine_args"]
    assert [(r["task"], r["length"]) for r in doc["tasks"]] == [
        ("passkey", 256), ("niah_multikey", 256), ("passkey", 384), ("niah_multikey", 384)
    ]  # fmt: skip
    assert all(0.0 <= r["score"] <= 100.0 and r["num_samples"] == 1 for r in doc["tasks"])
    assert len(doc["samples"]) == 4
    # exact attention over cpu-tier KV agrees with all-hot KV up to float rounding
    assert [row["length"] for row in doc["teacher_forced"]] == [256, 384]
    for row in doc["teacher_forced"]:
        assert row["num_tokens"] >= row["length"] - 20
        assert row["top1_agreement"] > 99.0 and row["mean_kl"] < 1e-4
    markdown = (out / "eval.md").read_text()
    assert "| cold | passkey | " in markdown and "top-1 agreement" in markdown

    again = tmp_path / "again"
    hot = ("--label", "hot", "--no-teacher-forced")
    result = CliRunner().invoke(app, _args(tiny_smol_vocab_dir, again, ("passkey",), ("384",), *hot))
    assert result.exit_code == 0, result.output
    rerun = json.loads((again / "eval.json").read_text())
    assert rerun["teacher_forced"] == []
    # all-hot KV gives the greedy output of cold-tier KV (the samples are seeded)
    assert rerun["samples"][0]["output"] == doc["samples"][2]["output"]

    both = tmp_path / "both"
    result = CliRunner().invoke(
        app, ["eval", "--combine", str(out), "--combine", str(again), "--out", str(both)]
    )
    assert result.exit_code == 0, result.output
    table = (both / "eval.md").read_text()
    assert "| cold | passkey | " in table and "| hot | passkey | - | " in table


def test_bad_engine_arg_is_one_error_line(tiny_smol_vocab_dir, tmp_path):
    result = CliRunner().invoke(
        app, ["eval", "-m", str(tiny_smol_vocab_dir), "--engine-arg", "no_such=1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and "no_such" in result.output


def test_sparse_teacher_forcing_runs_every_position_as_a_decode_row(tiny_smol_vocab_dir, tmp_path):
    """Sparse attention approximates decode rows only: its teacher-forced side goes one token per
    step. With a budget covering every cold block it is exact attention again, so it agrees."""
    out = tmp_path / "sparse"
    sparse = (
        "--label", "sparse-all", "--hot-kv-tokens", "64", "--cold-attention", "sparse",
        "--sparse-budget-tokens", "512",
    )  # fmt: skip
    result = CliRunner().invoke(app, _args(tiny_smol_vocab_dir, out, ("passkey",), ("256",), *sparse))
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "eval.json").read_text())
    assert "one token per step" in doc["teacher_forced_note"]
    (row,) = doc["teacher_forced"]
    assert row["top1_agreement"] > 99.0 and row["mean_kl"] < 1e-4


def test_lengths_and_tasks_take_space_separated_values_after_either_option():
    """typer gives `--tasks a b` only `a`; `b` arrives as an extra argument, as later lengths do."""
    assert eval_cmd.lengths_and_tasks(["2K"], ["passkey"], ["niah_multikey", "4K"]) == (
        [2048, 4096],
        ("passkey", "niah_multikey"),
    )
    assert eval_cmd.lengths_and_tasks(["8K,2K"], ["code,passkey"], []) == ([2048, 8192], ("code", "passkey"))
    assert eval_cmd.lengths_and_tasks([], [], []) == ([2048, 4096, 8192], eval_cmd.DEFAULT_TASKS)
    with pytest.raises(ValueError, match="neither a length .* nor a task .*passkey"):
        eval_cmd.lengths_and_tasks(["2K"], ["passkey"], ["niah"])
