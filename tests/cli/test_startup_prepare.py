"""`kvspill models prepare` saves the embedded GGUF's weights dequantized to the CPU dtype, once,
where the CPU engine dequantizes them (no g++ for the CPU GGUF kernel: the engine then maps them at
start instead of dequantizing, issue 50, item 5); with the kernel it leaves them in their blocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app
from kvspill.env import env_settings
from kvspill.gguf.cache import dequantized_weights_file
from kvspill.model.resolve import resolve_model
from kvspill.plan import host_rates
from kvspill.plan.cpu_dtype import pick_cpu_dtype


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(tmp_path / "gguf-cache"))
    env_settings.cache_clear()
    yield tmp_path / "gguf-cache"
    env_settings.cache_clear()


def test_prepare_saves_the_weights_once(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_rates, "cpu_keeps_gguf_blocks", lambda: False)  # no g++ or AVX-512
    _register_commands()
    dtype = pick_cpu_dtype()
    saved = dequantized_weights_file(resolve_model(None).path, dtype)
    assert saved is not None and not saved.exists()
    first = CliRunner().invoke(app, ["models", "prepare"])
    assert first.exit_code == 0, first.output
    assert f"{dtype} weights cached" in first.output
    assert saved.is_file()
    written = saved.stat().st_mtime_ns
    second = CliRunner().invoke(app, ["models", "prepare"])
    assert second.exit_code == 0, second.output
    assert f"{dtype} weights already cached" in second.output
    assert saved.stat().st_mtime_ns == written


def test_prepare_leaves_the_blocks_where_the_cpu_kernel_reads_them(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_rates, "cpu_keeps_gguf_blocks", lambda: True)
    _register_commands()
    saved = dequantized_weights_file(resolve_model(None).path, pick_cpu_dtype())
    result = CliRunner().invoke(app, ["models", "prepare"])
    assert result.exit_code == 0, result.output
    assert "weights left quantized (the CPU GGUF kernel reads them)" in result.output
    assert saved is not None and not saved.exists()  # no dense copy: the engine keeps the blocks
