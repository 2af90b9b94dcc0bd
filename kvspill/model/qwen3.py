"""Qwen3 (dense): Llama blocks plus a per-head RMSNorm on q and k before RoPE.

Biases on q/k/v/o follow `attention_bias` (False in released checkpoints). HF names:
`model.layers.N.self_attn.q_norm.weight`, `...k_norm.weight`, each [head_dim].
"""

from __future__ import annotations

from transformers import PretrainedConfig

from kvspill.model.llama import AttentionSpec, LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    @classmethod
    def attention_spec(cls, config: PretrainedConfig) -> AttentionSpec:
        bias = bool(getattr(config, "attention_bias", False))
        return AttentionSpec(qkv_bias=bias, o_bias=bias, qk_norm=True)
