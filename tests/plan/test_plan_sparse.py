"""The plan with `--cold-attention sparse`: the summaries take GPU memory, a decode row moves only
the budget's cold bytes (hand-computed figures)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspill.config import EngineConfig
from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, make_plan, request_from_engine_config
from kvspill.plan.cold_rates import GATHER_EFFICIENCY
from kvspill.plan.costs import (
    SPARSE_GRAPH_OVERHEAD_PER_BLOCK_S,
    SPARSE_GRAPH_OVERHEAD_PER_LAYER_S,
    SPARSE_OVERHEAD_PER_LAYER_S,
    STEP_OVERHEAD_PER_LAYER_S,
)
from kvspill.plan.spec import KNOWN_SHAPES

GiB = 1 << 30
LLAMA_8B = KNOWN_SHAPES["llama-8b"]


def _request(cold_attention: str, **kw) -> PlanRequest:
    base = dict(
        spec=LLAMA_8B,
        vram_budget_bytes=24 * GiB,
        context_len=131072,
        ram_budget_bytes=16 * GiB,
        gpu_memory_utilization=0.9,
        max_num_seqs=1,
        enforce_eager=True,
        cold_attention=cold_attention,
    )
    return PlanRequest(**(base | kw))


def test_sparse_plan_by_hand() -> None:
    """Llama-3.1-8B, 24 GiB at 0.9, 16 GiB cpu tier (8192 blocks), 128K, budget 4096 tokens.

    summaries  = 8192 blocks x 131,072 B (2 x 128 values x 8 kv heads x 32 layers x 2 B) = 1 GiB,
                 taken from the GPU KV tier (test_plan.py::test_hand_computed_llama_8b_24gib_128k):
                 5,383,221,609 - 1 GiB -> 2054 blocks = 32,864 tokens
    cold       = 131,072 - 32,864 = 98,208 tokens, of which 4096 attended (fraction 4096 / 98,208)
    cold_kv_s  = 4096 x 131,072 B / (0.92 x 25 GB/s pinned H2D)
    summary_s  = 1 GiB / 900 GB/s HBM
    """
    exact = make_plan(_request("stream"), DEFAULT_BANDWIDTHS)
    plan = make_plan(_request("sparse"), DEFAULT_BANDWIDTHS)
    assert exact.summary_bytes == 0 and plan.summary_bytes == GiB
    assert plan.gpu_kv_tokens == 32_864 and exact.gpu_kv_tokens == 41_056
    assert plan.placed_cpu_tokens == 98_208
    h2d, hbm = DEFAULT_BANDWIDTHS.h2d_gbs, DEFAULT_BANDWIDTHS.hbm_gbs
    assert h2d is not None and hbm is not None
    assert plan.decode.streamed_bytes == pytest.approx(4096 * 131_072, abs=1)
    assert plan.decode.cold_kv_s == pytest.approx(4096 * 131_072 / (GATHER_EFFICIENCY * h2d * 1e9), rel=1e-6)
    assert plan.decode.summary_s == pytest.approx(GiB / (hbm * 1e9))
    assert plan.decode.overhead_s == pytest.approx(
        32 * (STEP_OVERHEAD_PER_LAYER_S + SPARSE_OVERHEAD_PER_LAYER_S)
    )
    assert plan.decode.weights_s == exact.decode.weights_s
    assert plan.decode_tok_s > 5 * exact.decode_tok_s
    assert any("--cold-attention sparse: decode reads 4K of 95.9K cold tokens" in n for n in plan.notes)


def test_a_budget_above_the_cold_length_moves_every_cold_byte() -> None:
    plan = make_plan(_request("sparse", sparse_budget_tokens=1 << 20), DEFAULT_BANDWIDTHS)
    assert plan.decode.streamed_bytes == plan.placed_cpu_tokens * plan.kv_bytes_per_token


def test_the_engine_flag_reaches_the_plan() -> None:
    config = EngineConfig(cold_attention="sparse", sparse_budget_tokens=2048)
    request = request_from_engine_config(config, LLAMA_8B, 24 * GiB)
    assert (request.cold_attention, request.sparse_budget_tokens) == ("sparse", 2048)
    assert replace(request, cold_attention="stream").sparse_budget_tokens == 2048


def test_graph_replayed_sparse_steps_cost_the_selection_per_cold_block() -> None:
    """With CUDA graphs (one GPU, a block cache, every cold block in the cpu tier) a sparse step's
    overhead is the fit per layer plus a term per cold block; eager steps keep the host's cost."""
    eager = make_plan(_request("sparse", sparse_cache_seqs=1), DEFAULT_BANDWIDTHS)
    graphs = make_plan(_request("sparse", sparse_cache_seqs=1, enforce_eager=False), DEFAULT_BANDWIDTHS)
    cold_blocks = graphs.placed_cpu_tokens // 16
    assert graphs.decode.overhead_s == pytest.approx(
        32 * (STEP_OVERHEAD_PER_LAYER_S + SPARSE_GRAPH_OVERHEAD_PER_LAYER_S)
        + 32 * cold_blocks * SPARSE_GRAPH_OVERHEAD_PER_BLOCK_S
    )
    assert eager.decode.overhead_s == pytest.approx(
        32 * (STEP_OVERHEAD_PER_LAYER_S + SPARSE_OVERHEAD_PER_LAYER_S)
    )
    no_cache = make_plan(_request("sparse", sparse_cache_seqs=0, enforce_eager=False), DEFAULT_BANDWIDTHS)
    assert no_cache.decode.overhead_s == pytest.approx(eager.decode.overhead_s)  # no cache: eager
    assert graphs.decode_tok_s > eager.decode_tok_s


def test_the_plan_says_when_sparse_steps_run_without_graphs() -> None:
    eager = make_plan(_request("sparse", sparse_cache_seqs=1), DEFAULT_BANDWIDTHS)  # enforce_eager
    graphed = make_plan(_request("sparse", sparse_cache_seqs=1, enforce_eager=False), DEFAULT_BANDWIDTHS)
    assert any("without CUDA graphs (--enforce-eager)" in n for n in eager.notes)
    assert not any("without CUDA graphs" in n for n in graphed.notes)
