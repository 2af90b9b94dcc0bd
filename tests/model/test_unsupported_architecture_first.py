"""A model of an architecture kvspill does not run (a Gemma-3 GGUF) is refused for its architecture
by every path, not for a feature of it that comes up first (Gemma-3's per-layer-type RoPE):
`load_model` (generate, chat, LLM()), `check_max_model_len` (plan_before_start, with
--max-model-len) and serve's check before it binds its port."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from kvspill.config import EngineConfig
from kvspill.env import env_settings
from kvspill.errors import UnsupportedModelError
from kvspill.model.loader import check_max_model_len, load_hf_config, load_model
from kvspill.model.resolve import resolve_model


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(tmp_path / "gguf-cache"))
    env_settings.cache_clear()
    yield
    env_settings.cache_clear()


@pytest.fixture
def gemma3_gguf(tmp_path: Path) -> Path:
    """A one-layer gemma3 GGUF: transformers makes a Gemma3TextConfig of it (sliding and full
    attention layers, each with its own RoPE parameters)."""
    import gguf

    path = tmp_path / "gemma3.gguf"
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_context_length(256)
    w.add_embedding_length(32)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(64)
    w.add_tensor("token_embd.weight", np.zeros((32, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _is_the_architecture(e: pytest.ExceptionInfo[UnsupportedModelError]) -> None:
    assert "gemma3" in str(e.value) and "RoPE" not in str(e.value), str(e.value)


def test_load_model_refuses_the_architecture(gemma3_gguf: Path) -> None:
    resolved = resolve_model(str(gemma3_gguf))
    assert load_hf_config(resolved).model_type == "gemma3_text"
    with pytest.raises(UnsupportedModelError) as e:
        load_model(resolved, torch.device("cpu"), torch.float32)
    _is_the_architecture(e)


def test_check_max_model_len_refuses_the_architecture_first(gemma3_gguf: Path) -> None:
    with pytest.raises(UnsupportedModelError) as e:
        check_max_model_len(resolve_model(str(gemma3_gguf)), None, 128)
    _is_the_architecture(e)


def test_plan_before_start_refuses_the_architecture(gemma3_gguf: Path) -> None:
    from kvspill.engine.setup import plan_before_start

    with pytest.raises(UnsupportedModelError) as e:
        plan_before_start(EngineConfig(model=str(gemma3_gguf), device="cpu", max_model_len=128))
    _is_the_architecture(e)


def test_llm_refuses_the_architecture(gemma3_gguf: Path) -> None:
    from kvspill.llm import LLM

    with pytest.raises(UnsupportedModelError) as e:
        LLM(str(gemma3_gguf), device="cpu")
    _is_the_architecture(e)


def test_serve_refuses_the_architecture_before_binding(gemma3_gguf: Path) -> None:
    from kvspill.cli.serve_checks import check_model

    with pytest.raises(UnsupportedModelError, match="GGUF of architecture 'gemma3'.*runs: llama, mistral"):
        check_model(str(gemma3_gguf))
