"""`random:SHAPE:q4_k_m`: the per-tensor GGUF types of llama-quantize's Q4_K_M recipe."""

from __future__ import annotations

import torch

from kvspill.kernels.gguf_formats import random_quantized
from kvspill.model import random_init
from kvspill.model.quant import QuantEmbedding, QuantLinear
from kvspill.model.random_init import MIXED_Q4_K_M, q4_k_m_type, split_random_name


def test_q4_k_m_gives_q6_k_to_the_output_and_half_of_attn_v_and_ffn_down():
    # llama.cpp's use_more_bits at 32 layers: 0-3, 28-31 and 6, 9, ..., 27 (16 layers).
    more = [i for i in range(32) if q4_k_m_type("v_proj", i, 32) == "Q6_K"]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert [q4_k_m_type("down_proj", i, 32) for i in range(32)] == [
        q4_k_m_type("v_proj", i, 32) for i in range(32)
    ]
    assert q4_k_m_type("lm_head", 0, 32) == "Q6_K"
    assert {q4_k_m_type(n, 0, 32) for n in ("q_proj", "k_proj", "o_proj", "gate_proj", "up_proj")} == {"Q4_K"}


def test_random_q4_k_m_model_holds_the_mixed_shards(monkeypatch):
    assert split_random_name("random:llama-1b:q4_k_m") == ("llama-1b", MIXED_Q4_K_M)
    # Small blocks: the types and shard layout are what matters, not the 1B's bytes.
    monkeypatch.setattr(
        random_init, "random_quantized", lambda t, n, k, gen, scale: random_quantized(t, n, 256, gen, scale)
    )
    monkeypatch.setattr(QuantLinear, "set_weight", _record_types)
    monkeypatch.setattr(QuantEmbedding, "set_weight", lambda self, w: setattr(self, "types", [w.qtype]))
    loaded = random_init.build_random_model(
        "random:llama-1b:q4_k_m", torch.device("cpu"), torch.bfloat16, max_model_len=256
    )
    layers = loaded.model.model.layers
    assert layers[0].self_attn.qkv_proj.types == ["Q4_K", "Q4_K", "Q6_K"]
    assert layers[3].self_attn.qkv_proj.types == [
        "Q4_K",
        "Q4_K",
        "Q4_K",
    ]  # 16 layers: 0, 1, 4, 7, ... more bits
    assert layers[0].mlp.down_proj.types == ["Q6_K"] and layers[3].mlp.gate_up_proj.types == ["Q4_K", "Q4_K"]
    assert loaded.model.model.embed_tokens.types == ["Q6_K"]  # tied: also the output


def _record_types(self, shards):
    self.types = [s.qtype for s in shards]
