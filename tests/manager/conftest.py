"""A registry with two CPU profiles: the embedded SmolLM2 and the tiny random Llama (fast to load)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kvspill.registry import open_registry
from kvspill.registry.sources import inspect_source

API_KEY = "test-key"
# The machine running the suite is shared: loading SmolLM2 takes 25 s alone and a minute under load.
START_TIMEOUT_S = 180.0


def make_registry(root: Path, smollm2_gguf_path: Path, tiny_llama_dir: Path) -> Path:
    registry = open_registry(root)
    registry.add_model(inspect_source(str(smollm2_gguf_path), "smol"))
    registry.add_model(inspect_source(str(tiny_llama_dir), "tiny"))
    registry.save_profile("smol-cpu", "smol", {"device": "cpu", "max_model_len": 512})
    registry.save_profile("tiny-cpu", "tiny", {"device": "cpu", "max_model_len": 256})
    registry.close()
    return root


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def registry_dir(
    tmp_path_factory: pytest.TempPathFactory, smollm2_gguf_path: Path, tiny_llama_dir: Path
) -> Path:
    return make_registry(tmp_path_factory.mktemp("registry"), smollm2_gguf_path, tiny_llama_dir)
