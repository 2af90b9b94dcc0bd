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

from kvspill.errors import InvalidParameterError
from kvspill.plan.bandwidths import DEFAULT_BANDWIDTHS, Bandwidths
from kvspill.plan.cold_rates import cpu_kv_rate
from kvspill.plan.costs import (
    PREFILL_ATTENTION_SHARE,
    DecodeFloor,
    collectives_s,
    decode_floor,
    gpu_kv_decode_cost,
    prefill_seconds,
)
from kvspill.plan.gpu_budget import gpu_budget
from kvspill.plan.sparse import sparse_cold, sparse_gpu_bytes, stream_graphs_apply
from kvspill.plan.spec import DTYPE_BYTES, ModelSpec
from kvspill.plan.units import GiB
from kvspill.plan.weights import WEIGHT_QUANTIZATIONS, stored_weight_bytes, weight_read_gbs

KV_DTYPES = (
    "auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8"
)  # fmt: skip
# int8 KV stores one fp32 scale per token and kv head (kernels/kv_quant.INT8_SCALE_BYTES)
INT8_KV_SCALE_BYTES = 4
WEIGHT_DTYPES = ("auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32")


def dtype_bytes(name: str, param: str) -> int:
    """Bytes per element of a dtype name; `auto` is bf16 (the CUDA default, GGUF dequantized to it)."""
    if name == "auto":
        return 2
    if name not in DTYPE_BYTES:
        raise InvalidParameterError(param, f"unknown dtype {name!r} for {param}")
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class PlanRequest:
    """What the user asks for: a model, budgets, a context and the engine's batching flags."""

    spec: ModelSpec
    vram_budget_bytes: int  # everything the process may hold on the GPU
    context_len: int  # tokens of one sequence (prompt + output)
    ram_budget_bytes: int = 2 * GiB  # the CPU KV tier: one pinned pool
    disk_budget_bytes: int = 0  # the disk KV tier (memory-mapped files)
    gpu_memory_utilization: float = 0.75  # fraction of vram_budget_bytes the plan may use
    max_num_seqs: int = 64  # concurrency: sequences per step
    max_num_batched_tokens: int = 2048  # tokens per step: the prefill chunk
    block_size: int = 16
    kv_dtype: str = "auto"
    kv_skip_layers: int = 0  # layers whose KV keeps the weight dtype (--kv-cache-dtype-skip-layers)
    weight_dtype: str = "auto"
    sink_blocks: int = 1  # attention-sink blocks kept on the GPU per sequence
    recent_window_tokens: int = 4096  # most recent tokens kept on the GPU per sequence
    gpu_kv_budget_bytes: int | None = None  # a fixed GPU KV size (EngineConfig.kv_cache_memory_bytes)
    enforce_eager: bool = False  # True: no CUDA graphs, no graph reserve
    preset: str = "yours"
    # the engine's cold path: auto/stream, cpu, split or sparse (--cold-attention)
    cold_attention: str = "auto"
    sparse_budget_tokens: int = 4096  # sparse: cold tokens a decode row attends (--sparse-budget-tokens)
    sparse_cache_seqs: int = (
        0  # sparse: sequences whose chosen blocks stay on the GPU (attention/sparse/cache.py)
    )
    quantization: str = "none"  # how the weights are held: WEIGHT_QUANTIZATIONS
    cpu_offload_bytes: int = (
        0  # --cpu-offload-gb: at least this many weight bytes in pinned RAM (whole layers)
    )
    # Where the "gpu" tier lives: "cuda", or "cpu" (the CPU engine: the device pool is host RAM,
    # and there is no CUDA context, graph pool or allocator slack to reserve).
    device: str = "cuda"
    # What the engine measured after loading (engine/setup.py); None: the plan's estimate.
    measured_weight_bytes: int | None = None  # tensors the loaded model holds on the device
    measured_activation_bytes: int | None = None  # peak of one profiled prefill chunk
    measured_runtime_bytes: int | None = None  # device memory in use outside torch's tensors
    # the graph pool's dequantized weight (model/quant.dequant_scratch_bytes); None: estimated
    graph_scratch_bytes: int | None = None
    # Exact tier sizes in blocks (EngineConfig.num_kv_blocks / num_cpu_kv_blocks / num_disk_kv_blocks)
    gpu_kv_blocks: int | None = None
    cpu_kv_blocks: int | None = None
    disk_kv_blocks: int | None = None
    tensor_parallel_size: int = 1  # `spec` is one rank's share; the step adds the collectives
    stream_graphs: bool = True  # exact stream steps may replay CUDA graphs (KVSPILL_STREAM_CUDA_GRAPHS)
    rope_positions: int | None = None  # positions of the model's RoPE table (None: context_len)
    rope_scaling: str | None = None  # --rope-scaling's type ("yarn", ...), None: the model's own RoPE

    def __post_init__(self) -> None:
        def check(ok: bool, param: str, message: str) -> None:
            if not ok:
                raise InvalidParameterError(param, message)

        check(
            self.vram_budget_bytes > 0,
            "vram_budget",
            f"--vram-budget must be positive, got {self.vram_budget_bytes}",
        )
        check(self.context_len >= 1, "context", f"--context must be at least 1, got {self.context_len}")
        check(self.ram_budget_bytes >= 0, "ram_budget", "--ram-budget must not be negative")
        check(self.disk_budget_bytes >= 0, "disk_kv_budget", "--disk-kv-budget must not be negative")
        check(
            0.05 <= self.gpu_memory_utilization <= 1.0,
            "gpu_memory_utilization",
            f"--gpu-memory-utilization must be in [0.05, 1.0], got {self.gpu_memory_utilization}",
        )
        check(
            self.max_num_seqs >= 1,
            "max_num_seqs",
            f"--max-num-seqs must be at least 1, got {self.max_num_seqs}",
        )
        check(
            self.max_num_batched_tokens >= 1,
            "max_num_batched_tokens",
            f"--max-num-batched-tokens must be at least 1, got {self.max_num_batched_tokens}",
        )
        check(
            self.block_size in (8, 16, 32, 64, 128),
            "block_size",
            f"--block-size must be 8, 16, 32, 64 or 128, got {self.block_size}",
        )
        check(
            self.kv_dtype in KV_DTYPES,
            "kv_dtype",
            f"--kv-dtype must be one of {KV_DTYPES}, got {self.kv_dtype!r}",
        )
        check(
            self.weight_dtype in WEIGHT_DTYPES,
            "dtype",
            f"--dtype must be one of {WEIGHT_DTYPES}, got {self.weight_dtype!r}",
        )
        check(
            self.quantization in WEIGHT_QUANTIZATIONS,
            "quantization",
            f"--quantization must be one of {', '.join(WEIGHT_QUANTIZATIONS)}, got {self.quantization!r}",
        )
        check(self.device in ("cuda", "cpu"), "device", f"device must be cuda or cpu, got {self.device!r}")
        check(
            self.sink_blocks >= 0 and self.recent_window_tokens >= 0,
            "recent_window_tokens",
            "sink blocks and the recent window must not be negative",
        )

    @property
    def weight_dtype_bytes(self) -> int:
        return dtype_bytes(self.weight_dtype, "dtype")

    @property
    def layer_weight_bytes(self) -> int:
        """One decoder layer's weights, dense at weight_dtype (the unit of --cpu-offload-gb)."""
        return self.spec.layer_params * self.weight_dtype_bytes

    @property
    def offloaded_layers(self) -> int:
        """Leading layers kept in pinned RAM (model/offload.py: whole layers, rounded up)."""
        if self.cpu_offload_bytes <= 0:
            return 0
        return min(self.spec.num_layers, -(-self.cpu_offload_bytes // self.layer_weight_bytes))

    @property
    def offloaded_weight_bytes(self) -> int:
        return self.offloaded_layers * self.layer_weight_bytes

    @property
    def weight_bytes(self) -> int:
        """The weights the GPU holds (measured when the engine gave them): with offload, the
        resident layers plus two staging slots of one layer each."""
        if self.measured_weight_bytes is not None:
            return self.measured_weight_bytes
        slots = 2 * self.layer_weight_bytes if self.offloaded_layers else 0
        return self.stored_weight_bytes - self.offloaded_weight_bytes + slots

    @property
    def rope_table_positions(self) -> int:
        """Positions of the model's RoPE table: the loader's max_model_len, else this context."""
        return self.rope_positions or self.context_len

    @property
    def rope_table_bytes(self) -> int:
        """The RoPE table beside the weights (charged on CUDA; the measured weights exclude it)."""
        return self.spec.rope_table_bytes(self.rope_table_positions)

    @property
    def stored_weight_bytes(self) -> int:
        """All weights as held (on the GPU or, offloaded, in RAM), estimated from the shapes."""
        return stored_weight_bytes(self.spec, self.quantization, self.weight_dtype_bytes)

    @property
    def weight_read_gbs(self) -> float | None:
        """GB/s decode reads the weights at where a kernel bounds it (quantized); None: HBM's."""
        return weight_read_gbs(self.spec, self.quantization)

    @property
    def kv_format(self) -> str:
        """The KV values' format as the CPU kernel's rates name it (plan.costs.CPU_ATTN_RATE_VS_BF16)."""
        if self.kv_dtype == "int8":
            return "int8"
        if self.kv_dtype in ("float16", "fp16"):
            return "fp16"
        return {1: "fp8", 2: "bf16", 4: "fp32"}[self.kv_dtype_bytes]

    def with_cpu_kv_rate(self, bw: Bandwidths) -> Bandwidths:
        """`bw` with the CPU path's rate over this request's KV format and head size (calibrated
        over bf16 at head_dim 128)."""
        if bw.cpu_attn_gbs is None:
            return bw
        return replace(bw, cpu_attn_gbs=cpu_kv_rate(bw.cpu_attn_gbs, self.kv_format, self.spec.head_dim))

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one K or V value; `auto`: the weights' compute dtype."""
        if self.kv_dtype == "int8":
            return 1
        return self.weight_dtype_bytes if self.kv_dtype == "auto" else dtype_bytes(self.kv_dtype, "kv_dtype")

    @property
    def kv_scale_bytes(self) -> int:
        """Bytes stored beside each (token, kv head) row of K or V: int8's scale, else 0."""
        return INT8_KV_SCALE_BYTES if self.kv_dtype == "int8" else 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V for one token over all layers, scales included."""
        kept = min(self.kv_skip_layers, self.spec.num_layers) if self.kv_dtype != "auto" else 0
        return self.spec.kv_bytes_per_token(self.kv_dtype_bytes, self.kv_scale_bytes, kept, self.weight_dtype_bytes)  # fmt: skip


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


def compute_plan(request: PlanRequest, bandwidths: Bandwidths) -> MemoryPlan:
    """The plan's figures without advice (see `make_plan`)."""
    bw = bandwidths.complete(DEFAULT_BANDWIDTHS)
    spec, bs = request.spec, request.block_size
    weight_bytes = request.weight_bytes
    kvpt = request.kv_bytes_per_token
    block_bytes = kvpt * bs
    budget = gpu_budget(request, weight_bytes)
    gpu_left = budget.kv_left
    cpu_tokens = _tier_tokens(request.cpu_kv_blocks, request.ram_budget_bytes, block_bytes, bs)
    disk_tokens = _tier_tokens(request.disk_kv_blocks, request.disk_budget_bytes, block_bytes, bs)
    summary_bytes, sparse_cache = sparse_gpu_bytes(request, cpu_tokens + disk_tokens)
    gpu_left -= summary_bytes + sparse_cache
    gpu_tokens = _tier_tokens(request.gpu_kv_blocks, gpu_left, block_bytes, bs)
    chunk = request.max_num_batched_tokens
    hot = request.sink_blocks * bs + request.recent_window_tokens
    min_gpu = _round_up(hot + chunk, bs)
    can_spill = gpu_tokens >= min_gpu
    max_context = gpu_tokens + cpu_tokens + disk_tokens if can_spill else gpu_tokens
    ctx = request.context_len
    on_gpu = min(ctx, gpu_tokens)
    on_cpu = min(ctx - on_gpu, cpu_tokens) if can_spill else 0
    on_disk = min(ctx - on_gpu - on_cpu, disk_tokens) if can_spill else 0
    unplaced = ctx - on_gpu - on_cpu - on_disk
    seqs = _concurrency(ctx, gpu_tokens, max_context, hot, chunk, bs)
    gpu_kv_read, kv_turns_s = gpu_kv_decode_cost(
        request.kv_format, request.device == "cuda", kvpt, spec.kv_bytes_per_token(2, 0), spec.num_layers
    )
    floor = decode_floor(
        weight_bytes,
        on_gpu * gpu_kv_read,
        on_cpu * kvpt,
        on_disk * kvpt,
        request.with_cpu_kv_rate(bw),
        request.cold_attention,
        spec.num_layers,
        request.offloaded_weight_bytes,
        request.weight_read_gbs,
        sparse_cold(request, on_cpu, on_disk, summary_bytes),
        cold_graphs=stream_graphs_apply(request),
        kv_format=request.kv_format,
    )
    floor = replace(
        floor,
        collective_s=collectives_s(spec.num_layers, request.tensor_parallel_size),
        overhead_s=floor.overhead_s + kv_turns_s,
    )
    share = PREFILL_ATTENTION_SHARE[request.kv_format] if request.device == "cuda" else 1.0
    ttft = prefill_seconds(spec, ctx, chunk, gpu_tokens, cpu_tokens, weight_bytes, kvpt, bw, share)
    fits = gpu_left >= 0 and gpu_tokens > 0 and unplaced == 0 and seqs >= 1
    return MemoryPlan(
        preset=request.preset,
        request=request,
        bandwidths=bw,
        usable_vram_bytes=budget.usable,
        weight_bytes=weight_bytes,
        offloaded_weight_bytes=request.offloaded_weight_bytes,
        summary_bytes=summary_bytes,
        sparse_cache_bytes=sparse_cache,
        kv_bytes_per_token=kvpt,
        block_bytes=block_bytes,
        activation_peak_bytes=budget.activation,
        cuda_graph_reserve_bytes=budget.graph,
        allocator_slack_bytes=budget.slack,
        runtime_reserve_bytes=budget.runtime,
        rope_table_bytes=budget.rope_table,
        gpu_kv_bytes=gpu_tokens // bs * block_bytes,
        gpu_kv_tokens=gpu_tokens,
        cpu_kv_bytes=cpu_tokens // bs * block_bytes,
        cpu_kv_tokens=cpu_tokens,
        disk_kv_bytes=disk_tokens // bs * block_bytes,
        disk_kv_tokens=disk_tokens,
        min_gpu_kv_tokens=min_gpu,
        max_context=max_context,
        max_concurrent_seqs=seqs,
        context_len=ctx,
        placed_gpu_tokens=on_gpu,
        placed_cpu_tokens=on_cpu,
        placed_disk_tokens=on_disk,
        unplaced_tokens=unplaced,
        ttft_s=ttft,
        decode_tok_s=1.0 / floor.total_s,
        decode=floor,
        fits=fits,
    )
