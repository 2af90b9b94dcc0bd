"""`kvspill eval --tasks shift_ppl` on a tiny random Llama with SmolLM2's tokenizer: both modes score
the same tokens of a text three contexts long, the forced stream really passes the context, and
eval.md carries the table."""

from __future__ import annotations

import json
import math

from typer.testing import CliRunner

from kvspill.cli import eval_cmd
from kvspill.cli.main import app
from kvspill.eval.context_shift import _forced_nll
from kvspill.llm import LLM

eval_cmd.register(app)


def test_shift_ppl_writes_both_rows(tiny_smol_vocab_dir, tmp_path):
    out = tmp_path / "shift"
    args = [
        "eval", "-m", str(tiny_smol_vocab_dir), "--lengths", "128", "--tasks", "shift_ppl", "--no-teacher-forced",
        "--block-size", "8", "--device", "cpu", "--dtype", "float32", "--out", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "eval.json").read_text())
    shift, trunc = doc["context_shift"]
    assert (shift["mode"], trunc["mode"]) == ("context shift", "truncation")
    assert shift["num_tokens"] == trunc["num_tokens"] > 2 * 128  # past two contexts of tokens
    assert all(math.isfinite(r["perplexity"]) and r["perplexity"] > 1.0 for r in (shift, trunc))
    assert "| context shift |" in (out / "eval.md").read_text()


def test_forced_stream_passes_two_shifts(tiny_smol_vocab_dir):
    """Every token after the prompt is scored, through two context shifts (fewer raise)."""
    llm = LLM(str(tiny_smol_vocab_dir), device="cpu", dtype="float32", max_model_len=64, block_size=8,
              context_shift=True, enforce_eager=True)  # fmt: skip
    text = [5, 9, 13, 40, 41, 42, 43, 44] * 20  # 160 tokens: two shifts
    nll = _forced_nll(llm, text, 16)
    assert len(nll) == len(text) - 16 and all(x >= 0 for x in nll)
