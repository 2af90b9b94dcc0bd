"""`kvspill models prepare` builds the CPU-attention kernel, so the engine's first start on a
fresh host finds it built (issue 50: building it at start-up took 13.9 s)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app
from kvspill.env import env_settings
from kvspill.kernels import cpu_attention


@pytest.fixture
def fresh_ext_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty kernel cache, and load_kernel's memo forgotten (before and after)."""
    monkeypatch.setenv("KVSPILL_EXT_CACHE", str(tmp_path))
    env_settings.cache_clear()
    cpu_attention.load_kernel.cache_clear()
    yield tmp_path
    env_settings.cache_clear()
    cpu_attention.load_kernel.cache_clear()


@pytest.mark.skipif(shutil.which("g++") is None, reason="the kernel is built with g++")
def test_prepare_builds_the_cpu_attention_kernel(fresh_ext_cache: Path) -> None:
    _register_commands()
    result = CliRunner().invoke(app, ["models", "prepare"])
    assert result.exit_code == 0, result.output
    assert "CPU attention kernel built" in result.output
    built = list(fresh_ext_cache.glob("cpu_attention-*.so"))
    assert len(built) == 1
    # what start-up loads is the library prepare built, not a second build
    assert cpu_attention._build(shutil.which("g++") or "g++") == built[0]
