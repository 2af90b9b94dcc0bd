"""The arithmetic of the memory plan: the request, the plan, and the tiers between them.

`compute_plan` turns a `PlanRequest` (model shapes, budgets, engine flags, weight format, measured
inputs from the engine) and `Bandwidths` into a `MemoryPlan`: weight bytes, KV bytes per token, the
activation peak of one prefill chunk, fixed reserves (plan/gpu_budget.py), the GPU/CPU/disk KV tiers
in tokens, the longest context and the concurrent sequences that fit, and the predicted TTFT and
decode speed (the cost model: plan/costs.py; weight formats: plan/weights.py).

Invariants: no torch, no I/O; tier sizes are whole blocks; a request fits when one sequence of
`context_len` tokens has a place in the tiers and the GPU keeps its hot set (sink blocks, recent
window, one chunk); the engine sizes its pools with this arithmetic (plan/startup.py): measured
figures replace the estimates, no second formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvspill.plan.bandwidths import DEFAULT_BANDWIDTHS, Bandwidths
from kvspill.plan.choices import RuntimeChoices
from kvspill.plan.costs import (
    PREFILL_ATTENTION_SHARE,
    DecodeFloor,
    collectives_s,
    decode_floor,
    gpu_kv_decode_cost,
    prefill_seconds,
)
from kvspill.plan.gpu_budget import GpuBudget, gpu_budget
from kvspill.plan.request import (  # re-exported: the request's home before it had its own module
    INT8_KV_SCALE_BYTES,
    KV_DTYPES,
    WEIGHT_DTYPES,
    PlanRequest,
    dtype_bytes,
)
from kvspill.plan.sparse import sparse_cold, sparse_gpu_bytes

__all__ = [
    "INT8_KV_SCALE_BYTES",
    "KV_DTYPES",
    "WEIGHT_DTYPES",
    "MemoryPlan",
    "PlanRequest",
    "compute_plan",
    "dtype_bytes",
]


@dataclass(frozen=True)
class MemoryPlan:
    """Where everything goes and what it costs. Bytes in `*_bytes`, counts in `*_tokens`/`*_seqs`."""

    preset: str
    request: PlanRequest
    bandwidths: Bandwidths  # complete: missing figures filled from defaults (said in `source`)
    usable_vram_bytes: int  # vram_budget_bytes * gpu_memory_utilization
    weight_bytes: int  # on the GPU
    kv_bytes_per_token: int
    block_bytes: int  # one block of all layers' K and V
    activation_peak_bytes: int  # one chunk of max_num_batched_tokens (activation_peak_bytes)
    cuda_graph_reserve_bytes: int
    allocator_slack_bytes: int
    runtime_reserve_bytes: int
    gpu_kv_bytes: int  # whole blocks
    gpu_kv_tokens: int
    cpu_kv_bytes: int
    cpu_kv_tokens: int
    disk_kv_bytes: int
    disk_kv_tokens: int
    min_gpu_kv_tokens: int  # hot set + one chunk: below this the KV cannot spill
    max_context: int  # one sequence, all tiers
    max_concurrent_seqs: int  # sequences of context_len at once (memory only; not capped by max_num_seqs)
    context_len: int
    placed_gpu_tokens: int  # the requested context of one sequence, per tier
    placed_cpu_tokens: int
    placed_disk_tokens: int
    unplaced_tokens: int
    ttft_s: float  # prefill of context_len tokens, one sequence
    decode_tok_s: float  # one sequence at context_len (sparse rows with --cold-attention sparse)
    decode: DecodeFloor  # the breakdown of one decode step
    fits: bool
    advice: list[str] = field(default_factory=list)  # what to change, with numbers (when not fits)
    notes: list[str] = field(default_factory=list)  # worth knowing, not fatal
    offloaded_weight_bytes: int = 0  # weights in pinned RAM, copied in every step (--cpu-offload-gb)
    summary_bytes: int = 0  # --cold-attention sparse: key summaries of the cold-tier blocks, on the GPU
    sparse_cache_bytes: int = 0  # --cold-attention sparse: the chosen blocks cached on the GPU
    rope_table_bytes: int = 0  # the RoPE cos/sin table on the GPU (CUDA plans)
    # what the engine will decide at start-up (plan/choices.py): the same record it reads
    choices: RuntimeChoices | None = None

    @property
    def reserve_bytes(self) -> int:
        """What the GPU holds beside weights, activations and KV: graph pool, allocator slack,
        runtime memory and the RoPE table."""
        return (
            self.cuda_graph_reserve_bytes
            + self.allocator_slack_bytes
            + self.runtime_reserve_bytes
            + self.rope_table_bytes
        )


def _blocks_tokens(num_bytes: int, block_bytes: int, block_size: int) -> int:
    return max(0, num_bytes) // block_bytes * block_size


def _tier_tokens(exact_blocks: int | None, num_bytes: int, block_bytes: int, block_size: int) -> int:
    """A tier's tokens: the exact block count when one was set, else the whole blocks that fit."""
    if exact_blocks is not None:
        return exact_blocks * block_size
    return _blocks_tokens(num_bytes, block_bytes, block_size)


def _round_up(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size) * block_size


def _concurrency(context_len: int, gpu: int, total: int, hot: int, chunk: int, block_size: int) -> int:
    """Sequences of `context_len` that fit at once: all on the GPU, or spilling with a hot set each."""
    per_seq = _round_up(context_len, block_size)
    all_gpu = gpu // per_seq
    spilling = 0
    if gpu >= chunk + min(hot, per_seq):
        spilling = min(total // per_seq, (gpu - chunk) // min(hot, per_seq))
    return max(all_gpu, spilling)


@dataclass(frozen=True)
class _Tiers:
    """Tokens per tier and the sparse path's GPU bytes beside them."""

    gpu: int
    cpu: int
    disk: int
    summary_bytes: int
    sparse_cache_bytes: int
    kv_left: int  # GPU bytes left for KV after the sparse parts (negative: does not fit)


@dataclass(frozen=True)
class _Placement:
    """One sequence of the requested context, per tier, and what fits besides."""

    gpu: int
    cpu: int
    disk: int
    unplaced: int
    min_gpu: int  # hot set + one chunk: below this the KV cannot spill
    max_context: int
    max_seqs: int


def _tiers(request: PlanRequest, budget: GpuBudget) -> _Tiers:
    bs, block_bytes = request.block_size, request.kv_bytes_per_token * request.block_size
    cpu = _tier_tokens(request.cpu_kv_blocks, request.ram_budget_bytes, block_bytes, bs)
    disk = _tier_tokens(request.disk_kv_blocks, request.disk_budget_bytes, block_bytes, bs)
    summary_bytes, sparse_cache = sparse_gpu_bytes(request, cpu + disk)
    left = budget.kv_left - summary_bytes - sparse_cache
    gpu = _tier_tokens(request.gpu_kv_blocks, left, block_bytes, bs)
    return _Tiers(gpu, cpu, disk, summary_bytes, sparse_cache, left)


def _place(request: PlanRequest, tiers: _Tiers) -> _Placement:
    bs, chunk, ctx = request.block_size, request.max_num_batched_tokens, request.context_len
    hot = request.sink_blocks * bs + request.recent_window_tokens
    min_gpu = _round_up(hot + chunk, bs)
    can_spill = tiers.gpu >= min_gpu
    max_context = tiers.gpu + tiers.cpu + tiers.disk if can_spill else tiers.gpu
    on_gpu = min(ctx, tiers.gpu)
    on_cpu = min(ctx - on_gpu, tiers.cpu) if can_spill else 0
    on_disk = min(ctx - on_gpu - on_cpu, tiers.disk) if can_spill else 0
    seqs = _concurrency(ctx, tiers.gpu, max_context, hot, chunk, bs)
    return _Placement(on_gpu, on_cpu, on_disk, ctx - on_gpu - on_cpu - on_disk, min_gpu, max_context, seqs)


def _decode(
    request: PlanRequest,
    bw: Bandwidths,
    choices: RuntimeChoices,
    weight_bytes: int,
    tiers: _Tiers,
    at: _Placement,
) -> DecodeFloor:
    """One decode step of one sequence at the requested context, on the engine's cold path."""
    spec, kvpt = request.spec, request.kv_bytes_per_token
    gpu_kv_read, kv_turns_s = gpu_kv_decode_cost(
        request.kv_format, request.device == "cuda", kvpt, spec.kv_bytes_per_token(2, 0), spec.num_layers
    )
    floor = decode_floor(
        weight_bytes,
        at.gpu * gpu_kv_read,
        at.cpu * kvpt,
        at.disk * kvpt,
        request.with_cpu_kv_rate(bw),
        choices.cold_path.value,
        spec.num_layers,
        request.offloaded_weight_bytes,
        request.weight_read_gbs,
        sparse_cold(request, choices, at.cpu, at.disk, tiers.summary_bytes),
        cold_graphs=choices.cold_graphs is not None,
        kv_format=request.kv_format,
        split=choices.split,
        cpu_gguf_share=request.cpu_gguf_read_share,
    )
    return replace(
        floor,
        collective_s=collectives_s(spec.num_layers, request.tensor_parallel_size),
        overhead_s=floor.overhead_s + kv_turns_s,
    )


def compute_plan(request: PlanRequest, bandwidths: Bandwidths) -> MemoryPlan:
    """The plan's figures without advice (see `make_plan`): the reserves, the tiers, one sequence
    placed in them, then its decode step and prefill on the path the engine will choose. With
    `scale_pairs="auto"` the Q4_K scale pairs are planned only where the plan fits with them, a
    whole context still fits the GPU tier beside them and a fixed GPU KV size (--kv-cache-memory)
    stays whole: elsewhere their room holds KV (each token kept on the GPU is one a decode step
    need not fetch over PCIe), and `plan.request` says "off"."""
    plan = _compute_plan(request, bandwidths)
    if (
        request.scale_pairs != "auto"
        or request.measured_scale_pair_bytes is not None
        or not request.scale_pair_bytes
    ):
        return plan
    kept = plan.fits and plan.gpu_kv_tokens >= plan.context_len
    if kept and request.gpu_kv_budget_bytes is None:
        return plan
    without = _compute_plan(replace(request, scale_pairs="off"), bandwidths)
    # a fixed GPU KV size stays whole where the pairs take nothing from it
    return plan if kept and plan.gpu_kv_tokens >= without.gpu_kv_tokens else without


def _compute_plan(request: PlanRequest, bandwidths: Bandwidths) -> MemoryPlan:
    bw = bandwidths.complete(DEFAULT_BANDWIDTHS)
    choices = request.runtime_choices(bandwidths)
    bs, kvpt, weight_bytes = request.block_size, request.kv_bytes_per_token, request.weight_bytes
    budget = gpu_budget(
        request, weight_bytes, graph_batch=choices.graph_batch, mixed_graph_tokens=choices.mixed_graph_tokens
    )
    tiers = _tiers(request, budget)
    at = _place(request, tiers)
    read = request.weight_read_bytes  # a step streams the blocks (not the scale pairs beside them)
    floor = _decode(request, bw, choices, read, tiers, at)
    share = PREFILL_ATTENTION_SHARE[request.kv_format] if request.device == "cuda" else 1.0
    chunk = request.max_num_batched_tokens
    ttft = prefill_seconds(request.spec, request.context_len, chunk, tiers.gpu, tiers.cpu, read, kvpt, bw, share)  # fmt: skip
    fits = tiers.kv_left >= 0 and tiers.gpu > 0 and at.unplaced == 0 and at.max_seqs >= 1
    return MemoryPlan(
        preset=request.preset,
        request=request,
        bandwidths=bw,
        usable_vram_bytes=budget.usable,
        weight_bytes=weight_bytes,
        offloaded_weight_bytes=request.offloaded_weight_bytes,
        summary_bytes=tiers.summary_bytes,
        sparse_cache_bytes=tiers.sparse_cache_bytes,
        kv_bytes_per_token=kvpt,
        block_bytes=kvpt * bs,
        activation_peak_bytes=budget.activation,
        cuda_graph_reserve_bytes=budget.graph,
        allocator_slack_bytes=budget.slack,
        runtime_reserve_bytes=budget.runtime,
        rope_table_bytes=budget.rope_table,
        gpu_kv_bytes=tiers.gpu // bs * kvpt * bs,
        gpu_kv_tokens=tiers.gpu,
        cpu_kv_bytes=tiers.cpu // bs * kvpt * bs,
        cpu_kv_tokens=tiers.cpu,
        disk_kv_bytes=tiers.disk // bs * kvpt * bs,
        disk_kv_tokens=tiers.disk,
        min_gpu_kv_tokens=at.min_gpu,
        max_context=at.max_context,
        max_concurrent_seqs=at.max_seqs,
        context_len=request.context_len,
        placed_gpu_tokens=at.gpu,
        placed_cpu_tokens=at.cpu,
        placed_disk_tokens=at.disk,
        unplaced_tokens=at.unplaced,
        ttft_s=ttft,
        decode_tok_s=1.0 / floor.total_s,
        decode=floor,
        fits=fits,
        choices=choices,
    )
