"""`random:SHAPE:q4_k_m`: the per-tensor GGUF types of llama-quantize's Q4_K_M recipe; the Q4_K
weights' scale pairs for batched steps, as the engine attaches them and the plan counts them."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvspill.kernels.gguf_formats import QuantizedWeight, random_quantized
from kvspill.model import random_init
from kvspill.model.quant import (
    QuantEmbedding,
    QuantLinear,
    attach_scale_pairs,
    model_weight_bytes,
    split_q6k_weights,
)
from kvspill.model.random_init import MIXED_Q4_K_M, split_random_name
from kvspill.plan.request import PlanRequest
from kvspill.plan.spec import KNOWN_SHAPES, ModelSpec
from kvspill.plan.weights import q4_k_m_type, q4k_matmul_bytes, scale_pair_bytes


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


_SHAPE = ModelSpec(
    architecture="llama",
    num_layers=8,  # Q6_K v / down in layers 0, 3, 6 and 7 (use_more_bits)
    hidden_size=256,
    intermediate_size=512,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    vocab_size=300,
    tie_word_embeddings=False,  # the embedding in Q4_K, the lm_head in Q6_K
    max_position_embeddings=128,
    name="q4km-pairs",
)


def _q4k_parts(model: torch.nn.Module) -> list[QuantizedWeight]:
    return [p for m in model.modules() if isinstance(m, QuantLinear) for p in m.parts if p.qtype == "Q4_K"]


def test_scale_pairs_attach_to_every_q4_k_matmul_as_the_plan_counts_them(monkeypatch):
    monkeypatch.setitem(KNOWN_SHAPES, "q4km-pairs", _SHAPE)
    model = random_init.build_random_model(
        "random:q4km-pairs:q4_k_m", torch.device("cpu"), torch.bfloat16, max_model_len=128
    ).model
    q4k = _q4k_parts(model)
    # the plan's what-if q4_k_m holds exactly the Q4_K blocks the recipe gives the model
    assert sum(p.nbytes for p in q4k) == q4k_matmul_bytes(_SHAPE, "q4_k_m")
    before = model_weight_bytes(model)
    added = attach_scale_pairs(model, torch.bfloat16)
    assert added == scale_pair_bytes(q4k_matmul_bytes(_SHAPE, "q4_k_m")) > 0
    assert model_weight_bytes(model) == before + added
    paired = _q4k_parts(model)
    assert all(p.scale_pairs is not None and p.scale_pairs.dtype == torch.bfloat16 for p in paired)
    buffers = {n for n, _ in model.named_buffers()}
    assert "model.layers.0.mlp.gate_up_proj.scale_pairs_0" in buffers
    # the untied embedding (Q4_K) only gathers rows: no pairs
    embedding = model.model.embed_tokens.qweight
    assert embedding.qtype == "Q4_K" and embedding.scale_pairs is None
    assert "model.embed_tokens.scale_pairs_0" not in buffers
    assert attach_scale_pairs(model, torch.bfloat16) == 0  # once
    # the Q6_K weights (lm_head, the more-bits layers' v / down) carry none
    assert model.lm_head.parts[0].qtype == "Q6_K" and model.lm_head.parts[0].scale_pairs is None


def test_the_plan_counts_scale_pairs_only_where_the_engine_keeps_them():
    def request(**kw) -> PlanRequest:
        return PlanRequest(spec=_SHAPE, vram_budget_bytes=2**30, context_len=128, quantization="q4_k_m", **kw)

    pairs = scale_pair_bytes(q4k_matmul_bytes(_SHAPE, "q4_k_m"))
    assert request().scale_pair_bytes == pairs
    assert request().weight_bytes == request(max_num_seqs=1).weight_bytes + pairs
    assert request(max_num_seqs=1).scale_pair_bytes == 0  # one sequence: the GEMV reads the blocks alone
    assert request(device="cpu").scale_pair_bytes == 0
    assert request(scale_pairs="off").scale_pair_bytes == 0  # KVSPILL_SCALE_PAIRS=0
    assert request(measured_scale_pair_bytes=123).scale_pair_bytes == 123  # as loaded
    assert (
        PlanRequest(
            spec=_SHAPE, vram_budget_bytes=2**30, context_len=128, quantization="q6_k"
        ).scale_pair_bytes
        == 0
    )
    # a GGUF file: its own Q4_K bytes
    gguf = replace(
        _SHAPE,
        stored_weight_bytes=10**6,
        gguf_matmul_type_bytes=(("Q4_K", 144 * 1000),),
        gguf_main_type="Q4_K",
    )
    assert (
        PlanRequest(spec=gguf, vram_budget_bytes=2**30, context_len=128, quantization="gguf").scale_pair_bytes
        == 32 * 1000
    )


def test_a_tied_q4_k_embedding_is_the_lm_head_and_gets_pairs(monkeypatch):
    tied = replace(_SHAPE, tie_word_embeddings=True, name="q4k-tied")
    monkeypatch.setitem(KNOWN_SHAPES, "q4k-tied", tied)
    model = random_init.build_random_model(
        "random:q4k-tied:q4_k", torch.device("cpu"), torch.float16, max_model_len=128
    ).model
    matmul = sum(p.nbytes for p in _q4k_parts(model)) + model.model.embed_tokens.qweight.nbytes
    added = attach_scale_pairs(model, torch.float16)
    assert added == scale_pair_bytes(matmul)
    assert model.model.embed_tokens.qweight.scale_pairs.dtype == torch.float16
    # the plan's what-if q4_k counts the norms at 4.5 bits too: within a percent
    assert q4k_matmul_bytes(tied, "q4_k") == pytest.approx(matmul, rel=0.01)


def test_q6k_weights_split_in_place_and_multiply_the_same(monkeypatch):
    monkeypatch.setitem(KNOWN_SHAPES, "q4km-pairs", _SHAPE)
    model = random_init.build_random_model(
        "random:q4km-pairs:q4_k_m", torch.device("cpu"), torch.float32, max_model_len=128
    ).model
    mixed = [
        m for m in model.modules() if isinstance(m, QuantLinear) and any(p.qtype == "Q6_K" for p in m.parts)
    ]
    x = {
        id(m): torch.randn(3, m.parts[0].in_features, generator=torch.Generator().manual_seed(0))
        for m in mixed
    }
    before = {id(m): m(x[id(m)]) for m in mixed}
    buffers = {n: b.data_ptr() for n, b in model.named_buffers()}
    # The more-bits layers' down (2 super-blocks a row) move; v and the lm_head (1: rows 2 mod 4
    # bytes apart) stay.
    even = [p for m in mixed for p in m.parts if p.qtype == "Q6_K" and p.in_features == 512]
    assert len(even) == 4 and split_q6k_weights(model) == len(even)
    assert all(p.split == (p.qtype == "Q6_K" and p.in_features == 512) for m in mixed for p in m.parts)
    assert {n: b.data_ptr() for n, b in model.named_buffers()} == buffers  # in place: the same buffers
    for m in mixed:  # the CPU's torch reference reads the rows back in gguf's layout
        assert torch.equal(m(x[id(m)]), before[id(m)])
    assert split_q6k_weights(model) == 0  # once
