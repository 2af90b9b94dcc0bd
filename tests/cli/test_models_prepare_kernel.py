"""`kvspill models prepare` builds the CPU attention and decode-ops kernels (and for a GGUF model
the GGUF-weight kernel), so the engine's first start on a fresh host finds them built (issue 50: building at
start-up took 13.9 s)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app
from kvspill.env import env_settings
from kvspill.kernels import cpu_attention, cpu_build, cpu_decode_ops, cpu_gguf


@pytest.fixture
def fresh_ext_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty kernel cache, and load_kernel's memo forgotten (before and after)."""
    monkeypatch.setenv("KVSPILL_EXT_CACHE", str(tmp_path))
    env_settings.cache_clear()
    for module in (cpu_attention, cpu_decode_ops, cpu_gguf):
        module.load_kernel.cache_clear()
    yield tmp_path
    env_settings.cache_clear()
    for module in (cpu_attention, cpu_decode_ops, cpu_gguf):
        module.load_kernel.cache_clear()


@pytest.mark.skipif(shutil.which("g++") is None, reason="the kernel is built with g++")
def test_prepare_builds_the_cpu_attention_kernel(fresh_ext_cache: Path) -> None:
    _register_commands()
    result = CliRunner().invoke(app, ["models", "prepare"])
    assert result.exit_code == 0, result.output
    # the embedded model is a GGUF
    assert "CPU attention kernel built, CPU decode ops kernel built, CPU GGUF kernel built" in result.output
    compiler = shutil.which("g++") or "g++"
    kernels = (
        (cpu_attention, cpu_attention._HEADERS, cpu_build.BASE_FLAGS),
        (cpu_decode_ops, cpu_decode_ops._HEADERS, cpu_decode_ops._FLAGS),
        (cpu_gguf, cpu_gguf._HEADERS, cpu_gguf._FLAGS),
    )
    for module, headers, flags in kernels:
        built = list(fresh_ext_cache.glob(f"{module._SOURCE.stem}-*.so"))
        assert len(built) == 1
        # what start-up loads is the library prepare built, not a second build
        assert cpu_build.build(compiler, module._SOURCE, headers, flags) == built[0]
