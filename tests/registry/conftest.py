"""Fixtures for the pull tests: a local Hub (`hub_server.py`) with tiny repos, and tiny GGUF files."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry.hub_server import Hub, HubServer, HubState
from tiny_gguf import write_tiny_gguf


@pytest.fixture
def hub(tmp_path: Path, tiny_llama_dir: Path) -> Iterator[Hub]:
    """Repos: org/tiny (a tiny Llama in safetensors beside files kvspill never reads), org/tiny-GGUF
    (two tiny GGUF quantizations and a vision projector), org/embed (a sentence-transformers model)."""
    tiny = {p.name: p for p in tiny_llama_dir.iterdir()}
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * 100)
    tiny |= {"pytorch_model.bin": junk, "original/consolidated.00.pth": junk, "onnx/model.onnx": junk}
    ggufs = {
        "tiny-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "g" / "a.gguf", 256),
        "tiny-Q8_0.gguf": write_tiny_gguf(tmp_path / "g" / "b.gguf", 512),
        "mmproj-tiny-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "g" / "c.gguf", 128),
        "README.md": junk,
    }
    state = HubState(
        repos={
            "org/tiny": tiny,
            "org/tiny-GGUF": ggufs,
            "org/embed": _embedding_files(tmp_path, tiny_llama_dir),
        }
    )
    with HubServer(state) as url:
        yield Hub(url, state, tmp_path / "hf-cache", tmp_path / "data")


def _embedding_files(tmp_path: Path, tiny_llama_dir: Path) -> dict[str, Path]:
    root = tmp_path / "embed"
    root.mkdir()
    shutil.copy(tiny_llama_dir / "model.safetensors", root / "model.safetensors")
    (root / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    (root / "modules.json").write_text("[]")
    return {p.name: p for p in root.iterdir()}
