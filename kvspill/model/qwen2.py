"""Qwen2 / Qwen2.5: Llama blocks with a bias on q, k and v (none on o_proj).

Sliding-window layers (`use_sliding_window`) are rejected unless the window covers
max_model_len; `LlamaForCausalLM.check_supported` does that.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from kvspill.model.llama import AttentionSpec, LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    @classmethod
    def attention_spec(cls, config: PretrainedConfig) -> AttentionSpec:
        return AttentionSpec(qkv_bias=True, o_bias=False)
