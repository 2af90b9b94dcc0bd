"""A decode CUDA graph of more than MAX_GEMV_TOKENS rows dequantizes GGUF weights into its memory
pool: the plan charges the largest slice beside the graph (an fp32 SmolLM2 reference engine failed
its capture by its 108 MiB lm_head once the allocator was capped at the budget; an 8B's whole
1,002 MiB lm_head, twice in one graph pool, starved its eager steps: issue 55)."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv import MAX_GEMV_TOKENS
from kvspill.model.quant import QuantEmbedding, QuantLinear, dequant_scratch_bytes
from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, make_plan
from kvspill.plan.spec import KNOWN_SHAPES

GiB = 2**30


def _q8(out_features: int, in_features: int) -> QuantizedWeight:
    data = torch.zeros(out_features, in_features // 32 * 34, dtype=torch.uint8)
    return QuantizedWeight(data, "Q8_0", out_features, in_features)


def test_the_scratch_is_the_largest_dequantized_weight_past_the_gemv_rows() -> None:
    mlp = QuantLinear(64, [96, 96], bias=False, dtype=torch.float32)
    mlp.set_weight([_q8(96, 64), _q8(96, 64)])  # one type: fused into one [192, 64] weight
    head = QuantEmbedding(320, 64, torch.float32)
    head.set_weight(_q8(320, 64))
    model = nn.ModuleList([mlp, head])
    assert dequant_scratch_bytes(model, torch.float32, MAX_GEMV_TOKENS) == 0  # gemv: no dense copy
    assert dequant_scratch_bytes(model, torch.float32, 64) == 320 * 64 * 4  # the tied lm_head
    assert dequant_scratch_bytes(model, torch.bfloat16, 64) == 320 * 64 * 2
    assert dequant_scratch_bytes(nn.Linear(4, 4), torch.float32, 64) == 0  # nothing quantized


def test_the_scratch_is_one_slice_of_a_weight_larger_than_the_slice(monkeypatch) -> None:
    import kvspill.kernels.quant_linear as ql
    from kvspill.plan.gpu_budget import GGUF_DEQUANT_SLICE_BYTES

    assert GGUF_DEQUANT_SLICE_BYTES == ql.DEQUANT_SLICE_BYTES  # the plan's copy of the kernel's figure
    head = QuantEmbedding(320, 64, torch.float32)
    head.set_weight(_q8(320, 64))
    monkeypatch.setattr(ql, "_SLICE_ROW_MULTIPLE", 32)
    monkeypatch.setattr(ql, "DEQUANT_SLICE_BYTES", 100 * 64 * 4)  # 100 rows, rounded down to 96
    assert dequant_scratch_bytes(head, torch.float32, 64) == 96 * 64 * 4


def test_the_plan_charges_the_graph_scratch_beside_the_graph() -> None:
    request = PlanRequest(spec=KNOWN_SHAPES["llama-8b"], vram_budget_bytes=24 * GiB, context_len=32768)
    plain = make_plan(request, DEFAULT_BANDWIDTHS)
    scratch = make_plan(replace(request, graph_scratch_bytes=GiB), DEFAULT_BANDWIDTHS)
    assert scratch.cuda_graph_reserve_bytes == plain.cuda_graph_reserve_bytes + GiB
    assert scratch.gpu_kv_bytes < plain.gpu_kv_bytes
    eager = make_plan(replace(request, graph_scratch_bytes=GiB, enforce_eager=True), DEFAULT_BANDWIDTHS)
    assert eager.cuda_graph_reserve_bytes == 0  # no graphs, no graph pool


def test_before_loading_a_gguf_plan_estimates_the_largest_weight() -> None:
    """`kvspill plan` and the startup plan have no model yet: one slice of an 8B's bf16 lm_head
    (its 128,256 rows of 4,096 are more than fused gate+up's 28,672), for a what-if GGUF type;
    a small model's whole lm_head when it is smaller than a slice."""
    from kvspill.plan.gpu_budget import GGUF_DEQUANT_SLICE_BYTES, GGUF_GEMV_MAX_ROWS, gguf_graph_scratch_bytes

    assert GGUF_GEMV_MAX_ROWS == MAX_GEMV_TOKENS
    spec = KNOWN_SHAPES["llama-8b"]
    assert gguf_graph_scratch_bytes(spec, 2) == GGUF_DEQUANT_SLICE_BYTES < 128256 * 4096 * 2
    small = replace(spec, vocab_size=4096, intermediate_size=1024, num_heads=8, num_kv_heads=2)
    assert gguf_graph_scratch_bytes(small, 2) == 4096 * 4096 * 2  # its lm_head, whole
    request = PlanRequest(spec=spec, vram_budget_bytes=24 * GiB, context_len=32768, quantization="q4_k_m")
    dense = make_plan(replace(request, quantization="none"), DEFAULT_BANDWIDTHS)
    # "gguf" keeps a file's own format: a dense shape holds no blocks, so no scratch
    assert make_plan(replace(request, quantization="gguf"), DEFAULT_BANDWIDTHS).cuda_graph_reserve_bytes == (
        dense.cuda_graph_reserve_bytes
    )
    gguf = make_plan(request, DEFAULT_BANDWIDTHS)
    assert gguf.cuda_graph_reserve_bytes == dense.cuda_graph_reserve_bytes + GGUF_DEQUANT_SLICE_BYTES
    measured = make_plan(replace(request, graph_scratch_bytes=0), DEFAULT_BANDWIDTHS)
    assert measured.cuda_graph_reserve_bytes == dense.cuda_graph_reserve_bytes  # the engine's figure wins
    few_rows = make_plan(replace(request, max_num_seqs=GGUF_GEMV_MAX_ROWS), DEFAULT_BANDWIDTHS)
    assert few_rows.cuda_graph_reserve_bytes < gguf.cuda_graph_reserve_bytes  # gemv only: no copy
