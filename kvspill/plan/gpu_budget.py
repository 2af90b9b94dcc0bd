"""What the device that holds the KV pool must keep beside the KV: the plan's reserves.

`gpu_budget` splits the usable VRAM (`--vram-budget` x `gpu_memory_utilization`) into the weights,
the activation peak of one prefill chunk, the CUDA-graph pool, allocator slack, runtime memory
outside the torch allocator and the RoPE table; what is left holds KV. Measured figures (weights,
activation peak, runtime) replace the estimates when the engine gives them: the engine sizes its
pools with this very function after loading. On the CPU (the "gpu" tier is host RAM) only
weights and activations count.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspill.plan.choices import (
    MAX_GRAPH_BATCH,
    MIXED_GRAPH_PREFILLS,
    batch_buckets,
    mixed_buckets,
    mixed_decodes,
)
from kvspill.plan.costs import activation_peak_bytes, cold_staging_bytes, mixed_graph_bytes
from kvspill.plan.request import PlanRequest
from kvspill.plan.spec import ModelSpec
from kvspill.plan.units import MiB
from kvspill.plan.weights import holds_gguf_blocks

# CUDA context + cuBLAS workspaces + kernel images: outside the torch allocator. The engine
# measured ~0.65 GiB on H100 and H200 (torch 2.11): 512 MiB put 0.13 GiB too much KV on the GPU.
RUNTIME_RESERVE_BYTES = 640 * MiB
CUDA_GRAPH_BASE_BYTES = 256 * MiB  # vLLM reports 0.2-1 GiB for graph capture of 1-8B models
ALLOCATOR_SLACK_FRACTION = 0.03  # caching-allocator fragmentation, of the usable VRAM
ALLOCATOR_SLACK_MIN_BYTES = 128 * MiB
# Past this many rows a GGUF projection dequantizes its weight, then multiplies (kernels/gguf_gemv's
# MAX_GEMV_TOKENS; tests/plan/test_graph_scratch.py holds them equal).
GGUF_GEMV_MAX_ROWS = 16
# The most of one weight dequantized at once (kernels/quant_linear.DEQUANT_SLICE_BYTES; the test
# holds them equal): a larger weight goes in slices of rows.
GGUF_DEQUANT_SLICE_BYTES = 64 * MiB


def gguf_graph_scratch_bytes(spec: ModelSpec, act_bytes: int) -> int:
    """Before loading, the largest dense slice a GGUF projection past GGUF_GEMV_MAX_ROWS
    dequantizes (in a decode graph's pool, or as a step's transient): the lm_head's, fused
    gate+up's or fused qkv's, at most GGUF_DEQUANT_SLICE_BYTES (the engine measures it after
    loading, `model/quant.dequant_scratch_bytes`)."""
    rows = max(
        spec.vocab_size,
        2 * spec.intermediate_size,
        (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim,
    )
    return min(rows * spec.hidden_size * act_bytes, GGUF_DEQUANT_SLICE_BYTES)


@dataclass(frozen=True)
class GpuBudget:
    """Bytes of the device that holds the pool (see the module docstring)."""

    usable: int
    activation: int
    graph: int
    slack: int
    runtime: int
    rope_table: int
    kv_left: int  # what the KV tier may take (before sparse summaries and cache); may be negative


def gpu_budget(
    request: PlanRequest, weight_bytes: int, graph_batch: int | None = None, mixed_graph_tokens: int = 0
) -> GpuBudget:
    """The reserves of `request` beside `weight_bytes`; `graph_batch`: the largest decode batch
    the engine captures (`RuntimeChoices.graph_batch`, 0: no graphs; None: as the request says);
    `mixed_graph_tokens`: the rows of the mixed-step graphs (`RuntimeChoices.mixed_graph_tokens`),
    which share the decode graphs' pool and add their outputs and step to it (mixed_graph_bytes)."""
    if graph_batch is None:
        graph_batch = 0 if request.enforce_eager else min(request.max_num_seqs, MAX_GRAPH_BATCH)
    spec, kv_bytes = request.spec, request.kv_dtype_bytes
    usable = int(request.vram_budget_bytes * request.gpu_memory_utilization)
    act_bytes = request.weight_dtype_bytes
    gguf = holds_gguf_blocks(spec, request.quantization)
    # the largest step the scheduler builds: max_num_batched_tokens tokens of max_num_seqs sequences
    tokens = request.max_num_batched_tokens
    activation = request.measured_activation_bytes
    if activation is None:
        dequant = gguf_graph_scratch_bytes(spec, act_bytes) if gguf and tokens > GGUF_GEMV_MAX_ROWS else 0
        num_seqs = min(request.max_num_seqs, tokens)
        activation = activation_peak_bytes(spec, tokens, num_seqs, act_bytes, kv_bytes, dequant_bytes=dequant)
    elif request.device == "cuda":
        # the profiled step runs no cold attention: its staging buffers come beside it
        activation += cold_staging_bytes(spec, kv_bytes)
    graph = slack = runtime = rope = 0
    if request.device == "cuda":
        rope = request.rope_table_bytes  # one table per process (per rank), sized by max_model_len
        if graph_batch:
            batch = graph_batch
            peak = activation_peak_bytes(spec, batch, batch, act_bytes, kv_bytes, 0)
            graph = CUDA_GRAPH_BASE_BYTES + peak
            if mixed_graph_tokens:
                decodes = mixed_decodes(batch)
                buckets = mixed_buckets(batch_buckets(batch), decodes)
                chunk = mixed_graph_tokens - decodes
                graph += mixed_graph_bytes(spec, buckets, chunk, MIXED_GRAPH_PREFILLS, act_bytes)
            if request.graph_scratch_bytes is not None:
                graph += request.graph_scratch_bytes
            elif gguf and max(batch, mixed_graph_tokens) > GGUF_GEMV_MAX_ROWS:
                graph += gguf_graph_scratch_bytes(spec, act_bytes)
        slack = max(ALLOCATOR_SLACK_MIN_BYTES, int(usable * ALLOCATOR_SLACK_FRACTION))
        runtime = (
            RUNTIME_RESERVE_BYTES
            if request.measured_runtime_bytes is None
            else request.measured_runtime_bytes
        )
    left = usable - weight_bytes - activation - graph - slack - runtime - rope
    if request.gpu_kv_budget_bytes is not None:  # a fixed KV size, never more than what is left
        left = min(left, request.gpu_kv_budget_bytes)
    return GpuBudget(usable, activation, graph, slack, runtime, rope, left)
