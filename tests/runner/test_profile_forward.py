"""The startup's memory-profiling forward (`runner/profile._forward`) on a step larger than one
sequence may be: positions wrap at the RoPE table, so nothing reads past it (on the GPU the rotary
kernel reads the table unchecked: an illegal memory access; on the CPU index_select raises)."""

from __future__ import annotations

import torch

from kvspill.model.llama import head_dim_of
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.runner.profile import _forward
from kvspill.storage.storage import KVLayout, KVStorage


def test_profile_forward_takes_more_tokens_than_the_rope_table(tiny_llama_dir):
    cpu = torch.device("cpu")
    loaded = load_model(resolve_model(str(tiny_llama_dir)), cpu, torch.float32, max_model_len=32)
    config = loaded.model.config
    assert loaded.model.model.rotary_emb.max_positions == 32
    layout = KVLayout(
        config.num_hidden_layers, 16, config.num_key_value_heads, head_dim_of(config), torch.float32
    )
    num_tokens = 80  # the largest step of 3 sequences of <= 32 tokens
    storage = KVStorage(layout, -(-num_tokens // 16) + 1, cpu)
    with torch.inference_mode():
        hidden = _forward(loaded.model, storage, num_tokens, cpu)
    assert hidden.shape == (num_tokens, config.hidden_size) and torch.isfinite(hidden).all()
