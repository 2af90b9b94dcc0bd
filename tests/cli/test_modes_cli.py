"""--mode as users meet it: `serve --print-config` shows what a mode expands to on this host, an
engine of `--mode extended` runs the longer context with its RoPE raised, and registry profiles
take the mode like any engine flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.config import EngineConfig
from kvspill.registry.profiles import RegistryError, validate_flags


def _serve(*args: str) -> object:
    return CliRunner().invoke(serve_app(), ["serve", *args], env={})


def _expansion(output: str) -> dict[str, str]:
    """The `#   key = value` lines under '# --mode X on this host now'."""
    lines = output.split("# --mode", 1)[1].splitlines()[1:]
    return dict(line.removeprefix("#   ").split(" = ", 1) for line in lines if " = " in line)


def test_print_config_shows_what_the_mode_expands_to(tiny_llama_dir: Path) -> None:
    """tiny_llama: 1,024 trained positions, Llama 3 RoPE of factor 8 over 64."""
    result = _serve("--model", str(tiny_llama_dir), "--device", "cpu", "--mode", "extended", "--print-config")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "# --mode extended on this host now (a flag given above wins):" in result.output  # type: ignore[attr-defined]
    shown = _expansion(result.output)  # type: ignore[attr-defined]
    assert shown["max-model-len"] == "4096"
    rope = json.loads(shown["rope-scaling"])
    assert rope["rope_type"] == "llama3" and rope["factor"] == 32.0
    assert rope["original_max_position_embeddings"] == 64
    assert shown["cold-attention"] == "'auto'" and shown["cpu-kv-budget"] == '"0.00GiB"'  # the CPU: RAM pool
    default = _expansion(_serve("--model", str(tiny_llama_dir), "--device", "cpu", "--print-config").output)  # type: ignore[attr-defined]
    assert (
        default["max-model-len"] == "the model's trained context" and default["rope-scaling"] == "the model's"
    )
    given = _serve(
        "--model",
        str(tiny_llama_dir),
        "--device",
        "cpu",
        "--mode",
        "extended",
        "--max-model-len",
        "2048",
        "--print-config",
    )
    assert _expansion(given.output)["max-model-len"] == "2048"  # type: ignore[attr-defined]


def test_an_extended_engine_runs_the_longer_context(tiny_llama_dir: Path) -> None:
    from kvspill.engine.core import LLMEngine

    engine = LLMEngine(EngineConfig(model=str(tiny_llama_dir), device="cpu", mode="extended"))
    try:
        assert engine.max_model_len == 4096
    finally:
        engine.close()


def test_profiles_take_the_mode() -> None:
    assert validate_flags({"mode": "extreme", "cpu_kv_ram_share": "0.3"}) == {
        "mode": "extreme",
        "cpu_kv_ram_share": 0.3,
    }
    with pytest.raises(RegistryError, match="--mode must be one of default, extended, extreme"):
        validate_flags({"mode": "turbo"})
