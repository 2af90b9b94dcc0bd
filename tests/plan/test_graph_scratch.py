"""A decode CUDA graph of more than MAX_GEMV_TOKENS rows dequantizes GGUF weights into its memory
pool: the plan charges the largest one beside the graph (an fp32 SmolLM2 reference engine failed
its capture by its 108 MiB lm_head once the allocator was capped at the budget)."""

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


def test_the_plan_charges_the_graph_scratch_beside_the_graph() -> None:
    request = PlanRequest(spec=KNOWN_SHAPES["llama-8b"], vram_budget_bytes=24 * GiB, context_len=32768)
    plain = make_plan(request, DEFAULT_BANDWIDTHS)
    scratch = make_plan(replace(request, graph_scratch_bytes=GiB), DEFAULT_BANDWIDTHS)
    assert scratch.cuda_graph_reserve_bytes == plain.cuda_graph_reserve_bytes + GiB
    assert scratch.gpu_kv_bytes < plain.gpu_kv_bytes
    eager = make_plan(replace(request, graph_scratch_bytes=GiB, enforce_eager=True), DEFAULT_BANDWIDTHS)
    assert eager.cuda_graph_reserve_bytes == 0  # no graphs, no graph pool
