"""The CLI end to end on a tiny model: generate prints text, doctor runs everywhere, plan plans."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app


def _invoke(args: list[str]):
    _register_commands()
    return CliRunner().invoke(app, args)


def test_generate_on_a_local_model(tiny_llama_dir):
    result = _invoke(["generate", "hello world", "--model", str(tiny_llama_dir), "--device", "cpu",
                      "--max-tokens", "5", "--no-stream"])
    assert result.exit_code == 0, result.output
    assert "5 tokens" in result.output


def test_doctor_runs_without_a_gpu():
    result = _invoke(["doctor"])
    assert result.exit_code == 0, result.output
    assert "free RAM" in result.output and "CUDA" in result.output


def test_doctor_calibrate_saves_figures(tmp_path, monkeypatch):
    target = tmp_path / "calibration.json"
    monkeypatch.setenv("KVSPILL_CALIBRATION", str(target))
    from kvspill.env import env_settings

    env_settings.cache_clear()
    try:
        result = _invoke(["doctor", "--calibrate", "--quick", "--kv-disk-dir", str(tmp_path / "kv")])
    finally:
        env_settings.cache_clear()
    assert result.exit_code == 0, result.output
    saved = json.loads(target.read_text())
    assert saved["cpu_attn_gbs"] > 0 and saved["disk_read_gbs"] > 0


def test_bad_budget_is_a_clear_error():
    result = _invoke(["generate", "hi", "--vram-budget", "lots"])
    assert result.exit_code == 2 and "vram_budget" in result.output.replace("-", "_")
