"""Random-weight models with real shapes, for benchmarks (`--model random:llama-8b`).

`random:SHAPE:QTYPE` (e.g. `random:llama-8b:q4_k`) keeps every linear layer and the embedding in
that GGUF type (kernels/gguf_formats.py) with random but valid blocks: the quantized decode path
at a real 7-8B shape without a multi-GB file. `random:SHAPE:q4_k_m` mixes the types as
llama-quantize's Q4_K_M does (`q4_k_m_type`): Q6_K for the lm_head and for attn_v and ffn_down of
half the layers, Q4_K elsewhere. `random:SHAPE:fp8` holds the decoder layers'
projections in fp8 (model/fp8.py), as `--quantization fp8` does with a checkpoint.

Decode and prefill speed do not depend on weight values, so the benchmark workloads (the
shapes in `kvspill.plan.spec.KNOWN_SHAPES`, the same as the peer baseline's) run without any
checkpoint. Weights are drawn on the target device (no host copy); there is no tokenizer, so
requests must be token ids with `detokenize=False`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from kvspill.gguf.cache import light_config_class
from kvspill.kernels.fp8_linear import check_fp8_supported
from kvspill.kernels.gguf_formats import check_supported, random_quantized
from kvspill.model.fp8 import fill_fp8_randomly, install_fp8_modules
from kvspill.model.llama import LlamaDecoderLayer, LlamaForCausalLM, replace_projections
from kvspill.model.loader import LoadedModel, apply_rope_override
from kvspill.model.offload import offload_layers, place_with_offload
from kvspill.model.parallel import SINGLE, TensorParallel, VocabParallelEmbedding
from kvspill.model.quant import QuantEmbedding, QuantLinear
from kvspill.plan.spec import KNOWN_SHAPES, LLAMA3_ROPE_FACTORS, RANDOM_PREFIX, random_shape
from kvspill.plan.weights import q4_k_m_type

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# LlamaConfig's defaults for the fields a shape does not set (checked by tests/model/test_random_config.py).
LLAMA_CONFIG_DEFAULTS: dict[str, Any] = {
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-6,
    "pad_token_id": None,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pretraining_tp": 1,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
}
# fp16 scales of random quantized blocks: weights of roughly the dense init's 0.02 spread.
_QUANT_SCALE = 0.002
# RoPE of the real models these shapes stand for (Llama 3.2: factor 32; Llama 3.1: factor 8).


def is_random_model(model: str | None) -> bool:
    return model is not None and model.startswith(RANDOM_PREFIX)


def split_random_name(model: str) -> tuple[str, str | None]:
    """`random:llama-8b:q4_k` -> ("llama-8b", "Q4_K"); the type is None for dense weights.
    ModelNotFoundError for an unknown shape (plan/spec.random_shape, the planner's parse too)."""
    spec, qtype = random_shape(model)
    return spec.name, (qtype.upper() or None)


def _quantize_randomly(net: LlamaForCausalLM, qtype: str, dtype: torch.dtype) -> None:
    """Swap every linear layer and the embedding for quantized ones (on `meta`, before `to_empty`)."""
    replace_projections(
        net,
        lambda _i, _name, dense, out_sizes: QuantLinear(
            dense.in_features, out_sizes, dense.bias is not None, dtype
        ),
    )
    embed = net.model.embed_tokens
    assert isinstance(embed, (nn.Embedding, VocabParallelEmbedding))
    net.model.embed_tokens = QuantEmbedding(embed.num_embeddings, embed.embedding_dim, dtype, net.tp)
    if net.tie_word_embeddings:
        net.lm_head = net.model.embed_tokens
    else:
        head = net.lm_head
        assert isinstance(head, nn.Linear)
        net.lm_head = QuantLinear(head.in_features, [head.out_features], False, dtype)


MIXED_Q4_K_M = "Q4_K_M"


def _shard_types(net: LlamaForCausalLM, qtype: str) -> dict[int, list[str]]:
    """id(QuantLinear) -> the type of each of its shards (one type everywhere but Q4_K_M)."""
    types: dict[int, list[str]] = {}
    num_layers = len(net.model.layers)
    for i, layer in enumerate(net.model.layers):
        assert isinstance(layer, LlamaDecoderLayer)
        names = {
            layer.self_attn.qkv_proj: ("q_proj", "k_proj", "v_proj"),
            layer.self_attn.o_proj: ("o_proj",),
            layer.mlp.gate_up_proj: ("gate_proj", "up_proj"),
            layer.mlp.down_proj: ("down_proj",),
        }
        for module, shard_names in names.items():
            types[id(module)] = [
                q4_k_m_type(n, i, num_layers) if qtype == MIXED_Q4_K_M else qtype for n in shard_names
            ]
    types[id(net.lm_head)] = [q4_k_m_type("lm_head", 0, num_layers) if qtype == MIXED_Q4_K_M else qtype]
    return types


def _fill_quantized(net: LlamaForCausalLM, qtype: str, gen: torch.Generator) -> None:
    shard_types = _shard_types(net, qtype)
    single = qtype  # the embedding: Q4_K in a Q4_K_M file, Q6_K where it is also the output
    if qtype == MIXED_Q4_K_M:
        single = "Q6_K" if net.tie_word_embeddings else "Q4_K"
    for module in net.modules():
        if isinstance(module, QuantLinear):
            types = shard_types[id(module)]
            module.set_weight(
                [
                    random_quantized(t, n, module.in_features, gen, _QUANT_SCALE)
                    for t, n in zip(types, module.out_sizes, strict=True)
                ]
            )
        elif isinstance(module, QuantEmbedding):
            module.set_weight(
                random_quantized(single, module.shard_rows, module.embedding_dim, gen, _QUANT_SCALE)
            )


def build_random_model(
    model: str,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int | None,
    cpu_offload_bytes: int = 0,
    tp: TensorParallel = SINGLE,
) -> LoadedModel:
    """`tp`: this rank's shard, drawn alone (ranks' values differ from a one-rank model's)."""
    name, qtype = split_random_name(model)
    _check_random_name(qtype, device)
    spec = KNOWN_SHAPES[name]
    max_len = max_model_len or spec.max_position_embeddings
    config = _llama_config(name, max_len)
    with torch.device("meta"):
        net = LlamaForCausalLM(config, max_model_len=max_len, dtype=dtype, tp=tp)
        if qtype == "FP8":
            install_fp8_modules(net, dtype)
        elif qtype is not None:
            _quantize_randomly(net, qtype, dtype)
    offloaded = place_with_offload(net, device, cpu_offload_bytes)
    net.init_buffers()
    _fill_randomly(net, qtype, device)
    net.eval().requires_grad_(False)
    offloader = offload_layers(net, offloaded, device) if offloaded else None
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
        offloader=offloader,
    )


def _check_random_name(qtype: str | None, device: torch.device) -> None:
    """The weight type runs on `device` (the shape is known: `split_random_name` checked it)."""
    if qtype == "FP8":
        check_fp8_supported(device)
    elif qtype == MIXED_Q4_K_M:
        check_supported("Q4_K")
        check_supported("Q6_K")
    elif qtype is not None:
        check_supported(qtype)


def _llama_config(name: str, max_len: int) -> PretrainedConfig:
    """The Llama config of shape `name`, with the RoPE of the real model it stands for.

    A plain PretrainedConfig with LlamaConfig's fields, not LlamaConfig: importing a family's config
    class on transformers 5.17-5.23 builds its docstring from the modeling auto classes, which pull
    in generation, scikit-learn, torch._dynamo and sympy (2.8 s here on 5.17, 7.5 s on the H200
    host: bench/results/2026-12-02-h200-fit-by-default/). tests/model/test_random_config.py holds
    these fields equal to LlamaConfig's on the installed transformers."""
    spec = KNOWN_SHAPES[name]
    fields = {
        **LLAMA_CONFIG_DEFAULTS,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
    }
    config = light_config_class("llama").from_dict(fields)
    config.use_cache = True  # a field PretrainedConfig's constructor drops but LlamaConfig keeps
    if hasattr(config, "standardize_rope_params"):  # transformers 5
        config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    else:
        config.rope_theta, config.rope_scaling = 10000.0, None
    # transformers 4.x and 5 keep RoPE under different names; the loader's override handles both.
    apply_rope_override(config, shape_rope(name, max_len))
    return config


def shape_rope(name: str, max_len: int) -> dict[str, Any]:
    """The RoPE of the real model shape `name` stands for, as an --rope-scaling override."""
    return {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": LLAMA3_ROPE_FACTORS.get(name, 8.0),
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "max_position_embeddings": max(max_len, 1 << 17),
    }


def _fill_randomly(net: LlamaForCausalLM, qtype: str | None, device: torch.device) -> None:
    """Draws every weight from one generator seeded 0 on `device`: quantized blocks first, then
    dense matrices N(0, 0.02) and norms at 1."""
    gen = torch.Generator(device=device).manual_seed(0)
    if qtype == "FP8":
        fill_fp8_randomly(net, gen)
    elif qtype is not None:
        _fill_quantized(net, qtype, gen)
    with torch.no_grad():
        for param in net.parameters():
            if param.dim() == 1:
                param.fill_(1.0)  # norms
            elif param.device == device:
                param.normal_(0.0, 0.02, generator=gen)
            else:  # an offloaded layer: drawn on the device, then parked in RAM
                param.copy_(torch.empty_like(param, device=device).normal_(0.0, 0.02, generator=gen))
