"""Random-weight models with real shapes, for benchmarks (`--model random:llama-8b`).

Decode and prefill speed do not depend on weight values, so the benchmark workloads (the
shapes in `kvspill.plan.spec.KNOWN_SHAPES`, the same as the peer baseline's) run without any
checkpoint. Weights are drawn on the target device (no host copy); there is no tokenizer, so
requests must be token ids with `detokenize=False`.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from kvspill.errors import ModelNotFoundError
from kvspill.model.llama import LlamaForCausalLM
from kvspill.model.loader import LoadedModel
from kvspill.plan.spec import KNOWN_SHAPES

PREFIX = "random:"
# RoPE of the real models these shapes stand for (Llama 3.2: factor 32; Llama 3.1: factor 8).
_LLAMA3_ROPE_FACTOR = {"llama-1b": 32.0, "llama-3b": 32.0, "llama-8b": 8.0}


def is_random_model(model: str | None) -> bool:
    return model is not None and model.startswith(PREFIX)


def build_random_model(
    model: str, device: torch.device, dtype: torch.dtype, max_model_len: int | None
) -> LoadedModel:
    name = model[len(PREFIX) :]
    if name not in KNOWN_SHAPES:
        raise ModelNotFoundError(
            f"unknown random shape {name!r}: use one of {', '.join(sorted(KNOWN_SHAPES))}"
        )
    spec = KNOWN_SHAPES[name]
    max_len = max_model_len or spec.max_position_embeddings
    config = LlamaConfig(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
        max_position_embeddings=max(max_len, 1 << 17),
        rope_theta=500000.0,
        rope_scaling=dict(
            rope_type="llama3",
            factor=_LLAMA3_ROPE_FACTOR.get(name, 8.0),
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    )
    with torch.device("meta"):
        net = LlamaForCausalLM(config, max_model_len=max_len, dtype=dtype)
    net.to_empty(device=device)
    net.init_buffers()
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for param in net.parameters():
            if param.dim() == 1:
                param.fill_(1.0)  # norms
            else:
                param.normal_(0.0, 0.02, generator=gen)
    net.eval().requires_grad_(False)
    return LoadedModel(
        model=net,
        hf_config=config,
        architecture="LlamaForCausalLM",
        num_layers=spec.num_layers,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        hidden_size=spec.hidden_size,
        vocab_size=spec.vocab_size,
        max_model_len=max_len,
        dtype=dtype,
    )
