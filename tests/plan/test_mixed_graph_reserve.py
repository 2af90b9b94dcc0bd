"""The mixed-step CUDA graphs' share of the graph pool (plan/costs.mixed_graph_bytes): their outputs
and one step of their rows, beside the decode graphs' peak. Measured on an H200 (W3 8B 128K fp8,
8 sequences, bench/results/2026-12-03-h200-int16x-engine): the mixed graphs took 0.045 GiB more of
the card than decode graphs alone, where the whole-step estimate before reserved 0.19 GiB more."""

from __future__ import annotations

from dataclasses import replace

from kvspill.plan.choices import (
    MIXED_GRAPH_PREFILLS,
    batch_buckets,
    mixed_buckets,
    mixed_decodes,
    prefill_floor_tokens,
)
from kvspill.plan.costs import activation_peak_bytes, mixed_graph_bytes
from kvspill.plan.gpu_budget import CUDA_GRAPH_BASE_BYTES, gpu_budget
from kvspill.plan.request import PlanRequest
from kvspill.plan.spec import KNOWN_SHAPES

GiB = 2**30
SPEC = KNOWN_SHAPES["llama-8b"]


def _mixed(max_num_seqs: int) -> int:
    decodes = mixed_decodes(max_num_seqs)
    buckets = mixed_buckets(batch_buckets(max_num_seqs), decodes)
    return mixed_graph_bytes(SPEC, buckets, prefill_floor_tokens(16), MIXED_GRAPH_PREFILLS, 2)


def test_the_estimate_lands_on_the_measured_pool_growth() -> None:
    assert 0.040 * GiB < _mixed(8) < 0.055 * GiB  # measured: 0.045 GiB


def test_each_bucket_keeps_its_outputs() -> None:
    one = mixed_graph_bytes(SPEC, [1, 8], 256, 2, 2)
    three = mixed_graph_bytes(SPEC, [1, 2, 4, 8], 256, 2, 2)
    assert three - one == (2 + 2 + 4 + 2) * (SPEC.vocab_size * 4 + 8)  # fp32 logits, int64 ids
    assert mixed_graph_bytes(SPEC, [], 256, 2, 2) == 0


def test_the_step_counts_no_sampler_and_no_prompt_logprobs() -> None:
    """The graph's lm_head reads the sampled rows; a whole step of those tokens would count a
    256-row prompt-logprob slice through the sampler: several times the graph's step."""
    step = mixed_graph_bytes(SPEC, [8], 256, 2, 2) - 10 * (SPEC.vocab_size * 4 + 8)
    whole = activation_peak_bytes(SPEC, 8 + 256, 10, 2, 1, 0)
    assert 4 * step < whole


def test_the_pool_holds_the_decode_peak_and_the_mixed_graphs() -> None:
    request = PlanRequest(spec=SPEC, vram_budget_bytes=24 * GiB, context_len=131072, max_num_seqs=8)
    mixed_rows = mixed_decodes(8) + prefill_floor_tokens(16)
    decode_only = gpu_budget(request, 15 * GiB, graph_batch=8)
    both = gpu_budget(request, 15 * GiB, graph_batch=8, mixed_graph_tokens=mixed_rows)
    assert decode_only.graph == CUDA_GRAPH_BASE_BYTES + activation_peak_bytes(SPEC, 8, 8, 2, 2, 0)
    assert both.graph == decode_only.graph + _mixed(8)
    assert both.kv_left == decode_only.kv_left - _mixed(8)
    eager = gpu_budget(replace(request, enforce_eager=True), 15 * GiB, graph_batch=0, mixed_graph_tokens=0)
    assert eager.graph == 0
