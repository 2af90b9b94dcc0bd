"""The CLI end to end on a tiny model: generate prints text, doctor runs everywhere, plan plans."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app


def _invoke(args: list[str]):
    _register_commands()
    return CliRunner().invoke(app, args)


def test_generate_on_a_local_model(tiny_llama_dir):
    result = _invoke(
        [
            "generate",
            "hello world",
            "--model",
            str(tiny_llama_dir),
            "--device",
            "cpu",
            "--max-tokens",
            "5",
            "--no-stream",
        ]
    )
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


def test_status_without_a_server_says_how_to_start_one():
    result = _invoke(["status", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "kvspill serve" in result.output


def test_status_reads_a_server(tiny_llama_dir):
    from kvspill.cli.ops_cmd import format_status

    status = {
        "url": "http://x",
        "health": 200,
        "models": [{"id": "m", "max_model_len": 256}],
        "kv": {
            "tiers": {
                "gpu": {"blocks": 8, "used_blocks": 2, "bytes": 800, "used_bytes": 200},
                "cpu": {"blocks": 0, "used_blocks": 0, "bytes": 0, "used_bytes": 0},
            },
            "scheduler": {"num_running": 1, "num_waiting": 0, "num_preemptions": 0},
            "requests": {
                "r1": {"status": "running", "num_gpu_blocks": 2, "num_cpu_blocks": 0, "num_disk_blocks": 0}
            },
            "bytes_moved": {"gpu_to_cpu": 4096},
        },
    }
    text = format_status(status)
    assert "ready" in text and "model m (max_model_len 256)" in text and "2/8 blocks" in text
    assert "r1: gpu 2 / cpu 0 / disk 0" in text and "gpu->cpu 4.0 KiB" in text


def test_user_errors_are_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    import logging
    import sys

    import pytest

    from kvspill.cli import main as cli_main

    # set (not deleted): main() writes KVSPILL_DEBUG=1 for --debug, and only a variable the
    # monkeypatch set is restored afterwards; left set, later tests in this worker print tracebacks
    monkeypatch.setenv("KVSPILL_DEBUG", "0")
    logger = logging.getLogger("kvspill")
    monkeypatch.setattr(logger, "level", logger.level)  # main() sets it: restored afterwards
    monkeypatch.setattr(sys, "argv", ["kvspill", "generate", "-m", "/nonexistent/model", "hi"])
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "does not exist" in err and "Traceback" not in err
    monkeypatch.setattr(sys, "argv", ["kvspill", "--debug", "generate", "-m", "/nonexistent/model", "hi"])
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" in err and "does not exist" in err


def test_models_prepare_caches_the_embedded_gguf(smollm2_gguf_path):
    from kvspill.gguf.cache import cache_entry

    result = _invoke(["models", "prepare"])
    assert result.exit_code == 0, result.output
    assert (
        "prepared SmolLM2-135M-Instruct" in result.output
        and "GGUF config and tokenizer cached" in result.output
    )
    assert cache_entry(smollm2_gguf_path) is not None
    missing = _invoke(["models", "prepare", "/nonexistent/model.gguf"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
