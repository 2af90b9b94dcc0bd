"""`kvspill quickstart` on a host without a CUDA GPU: its plan is the engine on this CPU at the
CPU's rates (injected here, never timed), with no line that pretends a card."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import kvspill.llm
from kvspill.cli.main import _register_commands, app
from kvspill.env import env_settings
from kvspill.plan import host_rates


class _NoModel:
    """Stands in for the embedded model: the plan is under test, not the generation."""

    def __init__(self, model: str | None = None, **options: Any) -> None:
        self.options = options

    def chat(self, messages: list[dict[str, Any]], params: Any) -> list[SimpleNamespace]:
        return [SimpleNamespace(text="(a haiku)")]


@pytest.fixture
def cpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KVSPILL_CALIBRATION", str(tmp_path / "calibration.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(kvspill.llm, "LLM", _NoModel)
    env_settings.cache_clear()
    yield
    env_settings.cache_clear()


def test_quickstart_plans_the_engine_on_this_cpu(cpu_host: None) -> None:
    rates = {"cpu_dtype": "float32", "cpu_gemv_gbs": 9.0, "cpu_gemm_tflops": 0.1, "cpu_layer_s": 0.5e-3}
    host_rates.save_cpu_rates(
        host_rates.cpu_host_key(), {**rates, "cpu_kv_gbs": 7.0, "cpu_rates_at": "2026-12-02"}
    )
    _register_commands()
    result = CliRunner().invoke(app, ["quickstart"])
    assert result.exit_code == 0, result.output
    plan = result.output.split("== 2. plan")[1].split("== 3.")[0]
    assert ": the embedded model on this CPU at 2048 tokens" in plan
    assert "no CUDA GPU: the engine runs on the CPU (float32)" in plan
    assert "decode @ context (measured: quick measurement, 2026-12-02)" in plan
    assert "VRAM" not in plan and "8 GiB card" not in plan and "GPU KV tier" not in plan
    assert "(a haiku)" in result.output
