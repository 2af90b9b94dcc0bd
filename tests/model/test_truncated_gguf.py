"""A GGUF file cut short (an interrupted download) is refused when the model is resolved as
truncated, with what to do: cut in its header ("ends inside its header"), or in its tensor data
("expected N bytes, has M"); never a struct.error traceback, nor "Cannot load the config ...
kvspill supports: ..." which reads as an unsupported architecture."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import write_tiny_gguf

from kvspill.errors import ModelNotFoundError
from kvspill.gguf.header import read_header
from kvspill.model.resolve import resolve_model


def _cut(src: Path, dst: Path, keep: int) -> Path:
    dst.write_bytes(src.read_bytes()[:keep])
    return dst


@pytest.fixture
def whole(tmp_path: Path) -> Path:
    return write_tiny_gguf(tmp_path / "whole.gguf")


def test_the_header_walk_agrees_with_gguf(whole: Path) -> None:
    from kvspill.gguf.reader import read_gguf

    header, reader = read_header(whole), read_gguf(whole)
    assert header.architecture == "llama" and header.data_offset == reader.data_offset
    assert (
        header.data_end
        == whole.stat().st_size
        == max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    )
    assert [name for name, _ in header.tensor_types] == [t.name for t in reader.tensors]


@pytest.mark.parametrize("keep", [100, 300])
def test_cut_in_the_header(tmp_path: Path, whole: Path, keep: int) -> None:
    cut = _cut(whole, tmp_path / "cut.gguf", keep)
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(str(cut))
    assert (
        f"is truncated or corrupt: it ends inside its header (the file has {keep} bytes): download it again"
        in str(e.value)
    )


def test_cut_in_the_tensor_data(tmp_path: Path, whole: Path) -> None:
    size = whole.stat().st_size
    cut = _cut(whole, tmp_path / "cut.gguf", size - 64)
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(str(cut))
    assert f"is truncated or corrupt (expected {size} bytes, has {size - 64}): download it again" in str(
        e.value
    )


def test_llm_says_truncated(tmp_path: Path, whole: Path) -> None:
    from kvspill.llm import LLM

    cut = _cut(whole, tmp_path / "cut.gguf", whole.stat().st_size // 2)
    with pytest.raises(ModelNotFoundError, match="truncated"):
        LLM(str(cut), device="cpu")


def test_the_config_load_of_a_cut_header_says_truncated(
    tmp_path: Path, whole: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past resolve_model (a ResolvedModel made by hand), transformers' struct.error is still one line."""
    from kvspill.env import env_settings
    from kvspill.model.loader import load_hf_config
    from kvspill.model.resolve import ResolvedModel

    monkeypatch.setenv("KVSPILL_GGUF_CACHE", "off")
    env_settings.cache_clear()
    try:
        cut = _cut(whole, tmp_path / "cut.gguf", 300)
        with pytest.raises(
            ModelNotFoundError, match="the file is truncated or corrupt .*: download it again"
        ):
            load_hf_config(ResolvedModel("gguf", cut, "cut"))
    finally:
        env_settings.cache_clear()
