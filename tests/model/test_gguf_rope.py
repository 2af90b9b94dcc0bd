"""A GGUF file's RoPE scaling reaches the model's config (kvspill/gguf/rope.py): Llama 3.1's
`rope_freqs` tensor as HF's llama3 parameters, llama.cpp's rope.scaling.* keys as linear / yarn."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_gguf import write_tiny_gguf

from kvspill.env import env_settings
from kvspill.gguf.cache import gguf_hf_config
from kvspill.gguf.rope import llama3_divisors
from kvspill.model.layers import compute_inv_freq, rope_parameters


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(tmp_path / "gguf-cache"))
    env_settings.cache_clear()
    yield
    env_settings.cache_clear()


def test_the_divisors_are_hf_llama3s_frequencies():
    """llama.cpp's rope_freqs divisors times HF's llama3 inverse frequencies give plain RoPE's:
    the divisors carry exactly what HF's llama3 scaling does (Llama-3.1-8B's parameters)."""
    from transformers import LlamaConfig

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}  # fmt: skip
    llama3 = LlamaConfig(hidden_size=4096, num_attention_heads=32, rope_parameters=scaling)
    plain = LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        rope_parameters={"rope_theta": 500000.0, "rope_type": "default"},
    )
    scaled, _ = compute_inv_freq(llama3, 8192)
    base, _ = compute_inv_freq(plain, 8192)
    divisors = torch.tensor(llama3_divisors(128, 500000.0, 8.0, 1.0, 4.0, 8192))
    torch.testing.assert_close(scaled * divisors, base, rtol=1e-6, atol=0)
    assert 1.0 < divisors.median() < 8.0  # some frequencies in each band


def _config(tmp_path: Path, add) -> dict:
    path = write_tiny_gguf(tmp_path / "m" / "m.gguf", context_length=1024, add_more=add)
    config = gguf_hf_config(path)
    return {**rope_parameters(config), "max_position_embeddings": config.max_position_embeddings}


def test_rope_freqs_tensor_becomes_llama3_parameters(tmp_path):
    # the tiny file: hidden 32, 2 heads -> head_dim 16; theta 10000 (gguf's default)
    divisors = llama3_divisors(16, 10000.0, 8.0, 1.0, 4.0, 64)
    config = _config(tmp_path, lambda w: w.add_tensor("rope_freqs.weight", np.array(divisors, np.float32)))
    assert config["rope_type"] == "llama3" and config["factor"] == 8.0
    assert llama3_divisors(16, 10000.0, 8.0, config["low_freq_factor"], config["high_freq_factor"],
                           config["original_max_position_embeddings"]) == pytest.approx(divisors, rel=1e-6)  # fmt: skip
    assert config["max_position_embeddings"] == 1024


def test_linear_and_yarn_keys(tmp_path):
    import gguf

    def linear(w):
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(4.0)

    def yarn(w):
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
        w.add_rope_scaling_orig_ctx_len(1024)

    config = _config(tmp_path / "linear", linear)
    assert (config["rope_type"], config["factor"], config["max_position_embeddings"]) == ("linear", 4.0, 1024)
    config = _config(tmp_path / "yarn", yarn)
    assert (config["rope_type"], config["factor"]) == ("yarn", 4.0)
    assert (config["original_max_position_embeddings"], config["max_position_embeddings"]) == (1024, 4096)


def test_no_scaling_and_an_unexplained_tensor_are_plain_rope(tmp_path, caplog):
    assert _config(tmp_path / "plain", None)["rope_type"] == "default"
    odd = np.linspace(1.0, 3.0, 8, dtype=np.float32)  # no llama3 parameters give these
    with caplog.at_level(logging.WARNING, logger="kvspill.gguf.rope"):
        config = _config(tmp_path / "odd", lambda w: w.add_tensor("rope_freqs.weight", odd))
    assert config["rope_type"] == "default" and "matches no llama3 RoPE scaling" in caplog.text
