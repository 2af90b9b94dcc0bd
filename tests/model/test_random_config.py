"""A random shape's config (model/random_init._llama_config) is a plain PretrainedConfig with
exactly LlamaConfig's fields, so the engine builds and runs it as it would a LlamaConfig, without
importing the family's config class at start-up (the import costs seconds on transformers 5.17)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers.models.llama.configuration_llama import LlamaConfig

from kvspill.model.layers import build_cos_sin_cache, rope_parameters
from kvspill.model.loader import apply_rope_override
from kvspill.model.random_init import _llama_config, shape_rope
from kvspill.plan.spec import KNOWN_SHAPES


def _reference(name: str, max_len: int) -> LlamaConfig:
    spec = KNOWN_SHAPES[name]
    config = LlamaConfig(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
    )
    apply_rope_override(config, shape_rope(name, max_len))
    return config


def _comparable(config) -> dict:
    values = config.to_dict()
    values.pop("model_type")  # the class's, checked apart
    return values


@pytest.mark.parametrize("name", sorted(KNOWN_SHAPES))
def test_random_shape_config_equals_llamaconfig(name: str) -> None:
    light, expected = _llama_config(name, 4096), _reference(name, 4096)
    assert type(light).__name__ != "LlamaConfig"
    assert light.model_type == expected.model_type == "llama"
    assert _comparable(light) == _comparable(expected)
    assert light.use_cache is expected.use_cache
    assert rope_parameters(light) == rope_parameters(expected)
    assert torch.equal(build_cos_sin_cache(light, 512), build_cos_sin_cache(expected, 512))


def test_random_model_start_imports_no_config_class() -> None:
    """Building a random model's config loads no family config module (the slow import)."""
    code = (
        "import sys; from kvspill.model.random_init import _llama_config, shape_rope; _llama_config('llama-3b', 4096); "
        "print(sorted(m for m in sys.modules if m.startswith('transformers.models.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "transformers.models.llama.configuration_llama" not in out
    assert "transformers.models.auto.modeling_auto" not in out
