"""A cached GGUF config and tokenizer load without transformers' heavy modules (gguf/cache.py),
and what they load equals what the family's config class and AutoTokenizer load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.models.auto.configuration_auto import AutoConfig
from transformers.models.auto.tokenization_auto import AutoTokenizer

from kvspill.env import env_settings
from kvspill.gguf import cache as gguf_cache
from kvspill.model.layers import build_cos_sin_cache, rope_parameters

# Each family with what it must keep: non-default values, RoPE scaling, tied embeddings, biases.
FAMILY_CONFIGS = {
    "llama": {
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "tie_word_embeddings": True,
        "attention_bias": True,
    },  # fmt: skip
    "mistral": {"sliding_window": None, "head_dim": 32},
    "qwen2": {
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 4.0,
            "original_max_position_embeddings": 512,
        }
    },  # fmt: skip
    "qwen3": {"tie_word_embeddings": True, "head_dim": 48},
}
SHAPE = {
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
}  # fmt: skip


def _comparable(config) -> dict:
    values = config.to_dict()
    values.pop("_name_or_path", None)  # where it was read from
    return values


@pytest.mark.parametrize("model_type", sorted(FAMILY_CONFIGS))
def test_saved_config_reads_back_as_the_family_class_does(tmp_path: Path, model_type: str) -> None:
    full = AutoConfig.for_model(model_type, **SHAPE, **FAMILY_CONFIGS[model_type])
    full.save_pretrained(str(tmp_path))
    expected = AutoConfig.from_pretrained(str(tmp_path))
    light = gguf_cache.load_saved_config(tmp_path)
    assert type(light).__name__ != type(expected).__name__  # the family's class is not used
    assert _comparable(light) == _comparable(expected)
    assert vars(light).keys() - {"_name_or_path"} == vars(expected).keys() - {"_name_or_path"}
    assert light.model_type == expected.model_type == model_type
    assert rope_parameters(light) == rope_parameters(expected)
    assert torch.equal(build_cos_sin_cache(light, 4096), build_cos_sin_cache(expected, 4096))


def test_unknown_family_falls_back_to_autoconfig(tmp_path: Path) -> None:
    AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2).save_pretrained(str(tmp_path))
    config = gguf_cache.load_saved_config(tmp_path)
    assert type(config).__name__ == "GPT2Config"
    assert config.num_hidden_layers == 1  # gpt2's attribute_map: the reason it is not read plainly


@pytest.fixture
def cached_embedded(tmp_path, monkeypatch, smollm2_gguf_path: Path) -> Path:
    """The embedded GGUF with its config and tokenizer converted into a fresh cache."""
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(tmp_path / "gguf-cache"))
    env_settings.cache_clear()
    gguf_cache.gguf_hf_config(smollm2_gguf_path)
    gguf_cache.gguf_tokenizer(smollm2_gguf_path)
    entry = gguf_cache.cache_entry(smollm2_gguf_path)
    assert entry is not None
    yield entry
    env_settings.cache_clear()


def test_saved_tokenizer_equals_autotokenizer(cached_embedded: Path) -> None:
    light = gguf_cache.load_saved_tokenizer(cached_embedded / "tokenizer")
    auto = AutoTokenizer.from_pretrained(str(cached_embedded / "tokenizer"))
    assert type(light) is type(auto)
    assert light.get_vocab() == auto.get_vocab()
    assert light.special_tokens_map == auto.special_tokens_map
    assert light.chat_template == auto.chat_template
    text = "<|im_start|>user\nünïcödé ✓ 123\ttabs<|im_end|>"
    assert light.encode(text) == auto.encode(text)


def test_cached_load_imports_no_family_config_nor_auto_classes(
    cached_embedded: Path, smollm2_gguf_path
) -> None:
    script = f"""
import json, sys
from pathlib import Path
from kvspill.gguf.cache import gguf_hf_config, gguf_tokenizer
config = gguf_hf_config(Path({str(smollm2_gguf_path)!r}))
gguf_tokenizer(Path({str(smollm2_gguf_path)!r}))
heavy = [m for m in ("transformers.models.llama.configuration_llama", "transformers.activations",
                     "transformers.models.auto.configuration_auto", "sympy") if m in sys.modules]
print(json.dumps({{"heavy": heavy, "model_type": config.model_type}}))
"""
    env = {"KVSPILL_GGUF_CACHE": str(cached_embedded.parent.parent), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"heavy": [], "model_type": "llama"}
