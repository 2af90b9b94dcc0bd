"""Architecture name (config.json `architectures[0]`) -> kvspill model class.

GGUF files carry no `architectures`; their `model_type` maps through `_MODEL_TYPES`.
Anything else raises UnsupportedModelError naming what is supported.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from kvspill.errors import UnsupportedModelError
from kvspill.model.llama import LlamaForCausalLM
from kvspill.model.qwen2 import Qwen2ForCausalLM
from kvspill.model.qwen3 import Qwen3ForCausalLM

_ARCHITECTURES: dict[str, type[LlamaForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
}
_MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


def supported_architectures() -> list[str]:
    return sorted(_ARCHITECTURES)


def supported_model_types() -> list[str]:
    """The `model_type`s kvspill runs; a GGUF file's `general.architecture` is one of them."""
    return sorted(_MODEL_TYPES)


def get_model_class(architecture: str) -> type[LlamaForCausalLM]:
    cls = _ARCHITECTURES.get(architecture)
    if cls is None:
        raise UnsupportedModelError(
            f"Architecture {architecture!r} is not supported. kvspill supports: "
            f"{', '.join(supported_architectures())}."
        )
    return cls


def architecture_of(config: PretrainedConfig) -> str:
    """The architecture name from config.architectures, else from model_type (GGUF configs)."""
    archs = list(getattr(config, "architectures", None) or [])
    if archs:
        return str(archs[0])
    model_type = getattr(config, "model_type", "")
    arch = _MODEL_TYPES.get(model_type)
    if arch is None:
        raise UnsupportedModelError(
            f"Model type {model_type!r} is not supported. kvspill supports: "
            f"{', '.join(supported_architectures())}."
        )
    return arch
