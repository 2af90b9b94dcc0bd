"""The GGUF's dequantized weights saved by `models prepare` (gguf/cache.py, model/gguf_weights.py):
a load maps them and gets exactly the parameters a load that dequantizes gets; a stale or broken
copy is never used."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvspill.env import env_settings
from kvspill.gguf import cache as gguf_cache
from kvspill.model import gguf_weights
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model

DTYPE = torch.float16


@pytest.fixture
def saved(cache_dir: Path, smollm2_gguf_path: Path) -> Path:
    config = gguf_cache.gguf_hf_config(smollm2_gguf_path)
    file = gguf_weights.save_dense_weights(smollm2_gguf_path, config, DTYPE)
    assert file is not None and file.is_file()
    return file


def test_saved_tensors_are_the_dequantized_ones_cast(saved: Path, smollm2_gguf_path: Path) -> None:
    config = gguf_cache.gguf_hf_config(smollm2_gguf_path)
    fresh = dict(gguf_weights.iter_dequantized(gguf_weights.open_gguf(smollm2_gguf_path), config))
    mapped = gguf_cache.open_dequantized(smollm2_gguf_path, "float16")
    assert mapped is not None
    got = dict(mapped)
    assert got.keys() == fresh.keys()
    for name, tensor in fresh.items():
        assert got[name].dtype == DTYPE
        assert torch.equal(got[name], tensor.to(DTYPE)), name


def _params(path: Path) -> dict[str, torch.Tensor]:
    loaded = load_model(resolve_model(str(path)), torch.device("cpu"), DTYPE)
    return {name: p.detach().clone() for name, p in loaded.model.named_parameters()}


def test_a_load_from_the_saved_copy_equals_a_dequantizing_load(
    cache_dir: Path, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _params(smollm2_gguf_path)  # nothing saved yet: dequantized
    gguf_weights.save_dense_weights(smollm2_gguf_path, gguf_cache.gguf_hf_config(smollm2_gguf_path), DTYPE)
    calls: list[int] = []
    real = gguf_weights.iter_dequantized
    monkeypatch.setattr(gguf_weights, "iter_dequantized", lambda *a: calls.append(1) or real(*a))
    after = _params(smollm2_gguf_path)
    assert calls == []  # mapped, not dequantized
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name


def test_another_dtype_is_not_served_from_the_copy(saved: Path, smollm2_gguf_path: Path) -> None:
    assert gguf_cache.open_dequantized(smollm2_gguf_path, "float32") is None
    assert saved.is_file()  # the fp16 copy stays


def test_a_copy_from_another_kvspill_is_removed(
    saved: Path, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_cache, "kvspill_version", lambda: "0.0.0.other")
    assert gguf_cache.open_dequantized(smollm2_gguf_path, "float16") is None
    assert not saved.exists()


def test_a_truncated_copy_is_removed(saved: Path, smollm2_gguf_path: Path) -> None:
    with open(saved, "r+b") as f:
        f.truncate(saved.stat().st_size - 1024)
    assert gguf_cache.open_dequantized(smollm2_gguf_path, "float16") is None
    assert not saved.exists()


def test_with_the_cache_off_nothing_is_saved(
    smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", "off")
    env_settings.cache_clear()
    try:
        assert gguf_cache.dequantized_weights_file(smollm2_gguf_path, "float16") is None
        assert gguf_cache.save_dequantized(smollm2_gguf_path, "float16", iter(())) is None
        assert gguf_cache.open_dequantized(smollm2_gguf_path, "float16") is None
    finally:
        env_settings.cache_clear()
