"""The arithmetic of the memory plan: rates, request, plan, and the cost model behind them.

`compute_plan` turns a `PlanRequest` (model shapes, budgets, engine flags) and `Bandwidths` into
a `MemoryPlan`: weight bytes, KV bytes per token, the activation peak of one prefill chunk,
fixed reserves, the GPU/CPU/disk KV tiers in tokens, the longest context and the number of
concurrent sequences that fit, and the predicted TTFT and decode speed.

The cost model (DESIGN.md, "The physics"), for one sequence in exact mode:
    t_token = W / B_hbm + KV_gpu / B_hbm + (KV_cpu + KV_disk) / (B_h2d + B_cpu_attn) + KV_disk / B_disk
The cold term is min over splits f of max(f*C / B_h2d, (1-f)*C / B_cpu_attn), reached at
f = B_h2d / (B_h2d + B_cpu_attn): streaming and CPU attention run at once and add up (measured
so on the bench hosts; a desktop may not, which is why the planner prefers a calibration).
Prefill is compute-bound per chunk, overlapped with streaming the cold KV once per chunk.
Every time is a floor (bytes over the rate they move at, FLOPs over the rate they run at):
launch overheads and imperfect overlap are not modelled.

Invariants:
- No torch, no I/O. GB/s = 10**9 B/s, TFLOP/s = 10**12 FLOP/s; a `None` rate is "not measured"
  and is filled from `DEFAULT_BANDWIDTHS` (the plan's `bandwidths.source` says which).
- Tier sizes are whole blocks; a request fits when one sequence of `context_len` tokens has a
  place in the tiers and the GPU keeps its hot set (sink blocks, recent window, one chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvspill.errors import InvalidParameterError
from kvspill.plan.spec import DTYPE_BYTES, ModelSpec
from kvspill.plan.units import GiB, MiB

GB = 1e9  # bandwidths are in GB/s: 10**9 bytes per second
RATE_FIELDS = ("hbm_gbs", "h2d_gbs", "d2h_gbs", "cpu_attn_gbs", "disk_read_gbs", "gpu_tflops", "stream_gbs")
# Share of pinned H2D that the engine's stream path attends cold KV at, when not calibrated:
# 40 of 55 GB/s on the H200 host with 2 MiB blocks (docs/performance.md, 2026-11-26).
STREAM_EFFICIENCY = 0.73
# Per decode step and layer, what the kernels cost beyond their bytes (about ten graph-replayed
# launches of a few microseconds each and the GEMVs' shortfall from the copy bandwidth). With
# async scheduling (the CUDA default) the host's work runs under the GPU's and adds nothing:
# measured on 2026-11-26 as (step time - HBM floor) / layers, 37 us for W1 8K on both an H100 and
# an H200, 38-40 us for W2 8K/32K (H200), 33 us for W3 32K (H100); the plan lands within 2% of
# those (docs/performance.md). The serial engine (--no-async-scheduling) adds 0.2-0.3 ms of host
# work per step on top (47 us per layer was the fit before async scheduling).
STEP_OVERHEAD_PER_LAYER_S = 38e-6
COLD_STAGE_TOKENS = 16384  # tokens of one layer's cold KV per staging buffer (two: double-buffered)
RUNTIME_RESERVE_BYTES = 512 * MiB  # CUDA context + cuBLAS workspaces: outside the torch allocator
CUDA_GRAPH_BASE_BYTES = 256 * MiB  # vLLM reports 0.2-1 GiB for graph capture of 1-8B models
ALLOCATOR_SLACK_FRACTION = 0.03  # caching-allocator fragmentation, of the usable VRAM
ALLOCATOR_SLACK_MIN_BYTES = 128 * MiB
MAX_GRAPH_BATCH = 256  # largest decode batch captured in a CUDA graph (runner/cuda_graphs.py)
# Bits per weight of llama.cpp's GGUF file types as its quantize tool reports them for Llama-3-8B
# (Q4_K_M and Q5_K_M mix types per tensor): what a quantized file of a model would take.
# The single types are exact (block bytes x 8 / block weights).
GGUF_BITS_PER_WEIGHT = {
    "q4_0": 4.5, "q4_1": 5.0, "q5_0": 5.5, "q5_1": 6.0, "q8_0": 8.5, "q4_k": 4.5, "q5_k": 5.5, "q6_k": 6.5625,
    "q4_k_m": 4.89, "q5_k_m": 5.70,
}  # fmt: skip
# Share of HBM copy bandwidth at which decode reads GGUF-quantized weights: the dequantize-GEMV
# (kernels/gguf_gemv.py) is bound by its instructions, not its bytes. Fitted on one H200
# (2026-11-26): random llama-8b Q4_K, 16 GiB, decode 222.5 / 214.1 / 194.3 tok/s at 8K/16K/32K =
# weights at 1.49 TB/s of 4.19 (0.35); llama-8b Q8_0 at 8K, 216.9 tok/s = 2.72 TB/s of 4.14 (0.65)
# (bench/results/2026-11-26-h200-quant). fp8 (per-token fp8 activations + torch._scaled_mm): llama-8b
# at 8K on an H100, 165.4 tok/s = 2.02 TB/s of 2.99 (0.68; bench/results/2026-11-26-h100-fp8).
QUANT_GEMV_HBM_FRACTION = {"q8_0": 0.65, "fp8": 0.68}
QUANT_GEMV_HBM_FRACTION_DEFAULT = 0.35
# "none": dense at weight_dtype; "gguf": as the GGUF file stores them (kept quantized); or a GGUF type.
WEIGHT_QUANTIZATIONS = ("none", "gguf", "fp8", *GGUF_BITS_PER_WEIGHT)
KV_DTYPES = ("auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2")
WEIGHT_DTYPES = ("auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32")


@dataclass(frozen=True)
class Bandwidths:
    """Rates the cost model divides by. GB/s = 10**9 B/s; None: not measured (filled from defaults)."""

    hbm_gbs: float | None = None  # GPU device-to-device copy, read + write counted
    h2d_gbs: float | None = None  # pinned host -> device, large copies
    d2h_gbs: float | None = None  # device -> pinned host, large copies
    cpu_attn_gbs: float | None = None  # CPU decode attention, KV bytes read per second
    disk_read_gbs: float | None = None  # sequential read of a file not in the page cache
    gpu_tflops: float | None = None  # dense bf16 matmul, 10**12 FLOP/s
    source: str = "defaults"  # "calibration <path> <date>" or "defaults ..."
    cpu_tflops: float | None = None  # fp32 matmul on the CPU (informative)
    gpu_name: str | None = None
    gpu_total_bytes: int | None = None
    measured_at: str | None = None  # ISO date-time of the calibration
    # Cold KV attended per second by the engine's stream path (gather to the GPU + attend): what
    # exact decode over cold blocks reaches; None: STREAM_EFFICIENCY x h2d_gbs.
    stream_gbs: float | None = None

    def complete(self, fallback: Bandwidths) -> Bandwidths:
        """Self with every missing rate taken from `fallback`; `source` says which ones."""
        missing = [name for name in RATE_FIELDS if getattr(self, name) is None]
        if not missing:
            return self
        filled: dict[str, float | None] = {name: getattr(fallback, name) for name in missing}
        source = f"{self.source}; {', '.join(missing)} from {fallback.source}"
        return replace(self, source=source, **filled)  # type: ignore[arg-type]


# Unknown card: a desktop-class default is the honest guess (the project targets 8-24 GB cards).
DEFAULT_BANDWIDTHS = Bandwidths(
    hbm_gbs=900.0,  # RTX 4090 class: 1008 GB/s GDDR6X spec, about 90% reached by a device copy
    h2d_gbs=25.0,  # DESIGN.md, the physics: "a desktop (PCIe 4 about 25 GB/s ...)"
    d2h_gbs=25.0,  # same link, pinned memory
    # dual-channel DDR5 reads 35-60 GB/s (DESIGN.md); bf16 SDPA on the bench host reached 35 of its
    # 109 GB/s (bench/README.md): about a third of ~60
    cpu_attn_gbs=20.0,
    disk_read_gbs=3.0,  # assumed: sustained read of a PCIe 4 NVMe (no measurement in the repo yet)
    gpu_tflops=100.0,  # assumed: about 60% of the RTX 4090's 165 dense bf16 TFLOP/s
    source="defaults (desktop class: RTX 4090, PCIe 4, dual-channel DDR5): run `kvspill doctor --calibrate`",
)


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
    weight_dtype: str = "auto"
    sink_blocks: int = 1  # attention-sink blocks kept on the GPU per sequence
    recent_window_tokens: int = 4096  # most recent tokens kept on the GPU per sequence
    gpu_kv_budget_bytes: int | None = None  # a fixed GPU KV size (EngineConfig.kv_cache_memory_bytes)
    enforce_eager: bool = False  # True: no CUDA graphs, no graph reserve
    preset: str = "yours"
    cold_attention: str = "auto"  # the engine's cold path: auto/stream, cpu or split (--cold-attention)
    quantization: str = "none"  # how the weights are held: WEIGHT_QUANTIZATIONS
    cpu_offload_bytes: int = (
        0  # --cpu-offload-gb: at least this many weight bytes in pinned RAM (whole layers)
    )
    # Where the "gpu" tier lives: "cuda", or "cpu" (the CPU engine: the device pool is host RAM,
    # and there is no CUDA context, graph pool or allocator slack to reserve).
    device: str = "cuda"
    # What the engine measured after loading (engine_setup.py); None: the plan's estimate.
    measured_weight_bytes: int | None = None  # tensors the loaded model holds on the device
    measured_activation_bytes: int | None = None  # peak of one profiled prefill chunk
    measured_runtime_bytes: int | None = None  # device memory in use outside torch's tensors
    # Exact tier sizes in blocks (EngineConfig.num_kv_blocks / num_cpu_kv_blocks / num_disk_kv_blocks)
    gpu_kv_blocks: int | None = None
    cpu_kv_blocks: int | None = None
    disk_kv_blocks: int | None = None

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
    def stored_weight_bytes(self) -> int:
        """All weights as held (on the GPU or, offloaded, in RAM), estimated from the shapes."""
        spec = self.spec
        if (
            self.quantization == "gguf"
            and spec.stored_weight_bytes is not None
            and spec.weight_dtype_bytes is None
        ):
            return spec.stored_weight_bytes  # a quantized GGUF file, kept in its blocks
        if self.quantization in GGUF_BITS_PER_WEIGHT:
            return -(-spec.num_params * round(GGUF_BITS_PER_WEIGHT[self.quantization] * 100) // 800)
        if self.quantization == "fp8":  # the layers' projections: 1 byte a weight + 4 per row (model/fp8.py)
            linear = spec.num_layers * spec.layer_linear_params
            # rows of qkv, o, gate_up and down
            rows = spec.num_heads * spec.head_dim + 2 * spec.kv_heads_dim + 2 * spec.hidden_size
            rows = spec.num_layers * (rows + 2 * spec.intermediate_size)
            dense = spec.num_params - linear
            return linear + 4 * rows + dense * self.weight_dtype_bytes
        return spec.weight_bytes(self.weight_dtype_bytes)

    @property
    def weight_read_fraction(self) -> float:
        """Share of HBM bandwidth decode reads the weights at (1.0 dense; GGUF types: measured)."""
        spec = self.spec
        if (
            self.quantization == "gguf"
            and spec.stored_weight_bytes is not None
            and spec.weight_dtype_bytes is None
        ):
            return QUANT_GEMV_HBM_FRACTION_DEFAULT  # the file's own mix of types
        if self.quantization in GGUF_BITS_PER_WEIGHT:
            return QUANT_GEMV_HBM_FRACTION.get(self.quantization, QUANT_GEMV_HBM_FRACTION_DEFAULT)
        if self.quantization == "fp8":
            return QUANT_GEMV_HBM_FRACTION["fp8"]
        return 1.0

    @property
    def kv_dtype_bytes(self) -> int:
        """`auto`: the weights' compute dtype."""
        return self.weight_dtype_bytes if self.kv_dtype == "auto" else dtype_bytes(self.kv_dtype, "kv_dtype")


@dataclass(frozen=True)
class DecodeFloor:
    """One decode step of one sequence, in seconds per component (exact attention)."""

    weights_s: float  # all weights read once from HBM
    gpu_kv_s: float  # gpu-tier KV read from HBM
    cold_kv_s: float  # cpu+disk KV over the cold path (stream, CPU attention, or both)
    disk_read_s: float  # disk-tier KV read from disk every step
    stream_fraction: float  # of cold KV bytes streamed to the GPU; the rest attended on the CPU
    streamed_bytes: int
    cpu_attn_bytes: int
    disk_bytes: int
    overhead_s: float = 0.0  # kernel launches and host work per step (STEP_OVERHEAD_PER_LAYER_S)
    offload_s: float = 0.0  # offloaded weights copied over PCIe every step (--cpu-offload-gb)

    @property
    def total_s(self) -> float:
        return (
            self.weights_s
            + self.gpu_kv_s
            + self.cold_kv_s
            + self.disk_read_s
            + self.overhead_s
            + self.offload_s
        )


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
    decode_tok_s: float  # one sequence at context_len, exact attention
    decode: DecodeFloor  # the breakdown of one decode step
    fits: bool
    advice: list[str] = field(default_factory=list)  # what to change, with numbers (when not fits)
    notes: list[str] = field(default_factory=list)  # worth knowing, not fatal
    offloaded_weight_bytes: int = 0  # weights in pinned RAM, copied in every step (--cpu-offload-gb)


def activation_peak_bytes(
    spec: ModelSpec,
    num_tokens: int,
    num_sampled: int,
    act_bytes: int,
    kv_bytes: int,
    cold_stage_tokens: int = COLD_STAGE_TOKENS,
) -> int:
    """Peak live activations of one step of `num_tokens` (flash-style attention, no [T, ctx] scores).

    The largest of three phases, each counting what is alive at once; t = num_tokens, h = hidden,
    a = activation bytes, I = intermediate, q = num_heads*head_dim, kv = num_kv_heads*head_dim.
    """
    t, h, d = num_tokens, spec.hidden_size, spec.head_dim
    q_width, kv_width = spec.num_heads * d, spec.kv_heads_dim
    residual = 3 * t * h * act_bytes  # residual stream, its normed copy, the block's output
    # attention: fused qkv [t, q+2kv], q and k after rope [t, q+kv], output [t, q]; fp32 partials
    # (o, lse) of the gpu part and the cold part before the log-sum-exp merge; double-buffered
    # staging of one layer's cold K and V streamed in (cold_stage_tokens each)
    attn = t * (q_width + 2 * kv_width + q_width + kv_width + q_width) * act_bytes
    attn += 2 * t * spec.num_heads * (d + 1) * 4
    attn += 2 * cold_stage_tokens * 2 * kv_width * kv_bytes
    # mlp: fused gate_up [t, 2I], silu(gate) [t, I], silu(gate) * up [t, I]
    mlp = 4 * t * spec.intermediate_size * act_bytes
    # logits only for the rows sampled (one per sequence): the rows, fp32 logits and probabilities
    logits = num_sampled * h * act_bytes + 2 * num_sampled * spec.vocab_size * 4
    return residual + max(attn, mlp, logits)


def decode_floor(
    weight_bytes: int,
    gpu_kv_bytes: int,
    cpu_kv_bytes: int,
    disk_kv_bytes: int,
    bw: Bandwidths,
    cold_path: str = "auto",
    num_layers: int = 0,
    offloaded_bytes: int = 0,
    weight_read_fraction: float = 1.0,
) -> DecodeFloor:
    """Seconds per decode token: weights and GPU KV over HBM, cold KV over the engine's cold path
    ("auto"/"stream": streamed to the GPU; "cpu": attended in RAM; "split": both at once, shared
    in the ratio of their rates), disk KV over disk, plus the per-layer step overhead."""
    hbm, h2d, cpu = bw.hbm_gbs or 1.0, bw.h2d_gbs or 1.0, bw.cpu_attn_gbs or 1.0
    stream = bw.stream_gbs or STREAM_EFFICIENCY * h2d
    cold = cpu_kv_bytes + disk_kv_bytes  # disk blocks pass through RAM, then take either path
    fraction = {"cpu": 0.0, "split": stream / (stream + cpu)}.get(cold_path, 1.0)
    rate = {"cpu": cpu, "split": stream + cpu}.get(cold_path, stream)
    return DecodeFloor(
        weights_s=weight_bytes / (hbm * weight_read_fraction * GB),
        gpu_kv_s=gpu_kv_bytes / (hbm * GB),
        cold_kv_s=cold / (rate * GB),
        disk_read_s=disk_kv_bytes / ((bw.disk_read_gbs or 1.0) * GB),
        stream_fraction=fraction if cold else 0.0,
        streamed_bytes=round(cold * fraction),
        cpu_attn_bytes=cold - round(cold * fraction),
        disk_bytes=disk_kv_bytes,
        overhead_s=num_layers * STEP_OVERHEAD_PER_LAYER_S,
        # The copy stream runs beside compute, but offloaded layers wait for their copy: the
        # layer copies add up (PCIe-bound, as vLLM's cpu_offload_gb).
        offload_s=offloaded_bytes / (h2d * GB),
    )


def prefill_seconds(
    spec: ModelSpec,
    context_len: int,
    chunk: int,
    gpu_tokens: int,
    cpu_tokens: int,
    weight_bytes: int,
    kvpt: int,
    bw: Bandwidths,
) -> float:
    """Time to the first token: per chunk, compute overlapped with streaming its cold KV once.

    FLOPs per chunk of n tokens after s earlier ones: 2 * linear params * n (every matmul is a
    multiply-add per weight) plus 4 * layers * num_heads * head_dim per (query, key) pair (QK^T
    and PV, 2 FLOPs each), with n*s + n(n+1)/2 causal pairs. lm_head runs for the last row only.
    """
    flop_rate = (bw.gpu_tflops or 1.0) * 1e12
    hbm, h2d, d2h = (bw.hbm_gbs or 1.0) * GB, (bw.h2d_gbs or 1.0) * GB, (bw.d2h_gbs or 1.0) * GB
    disk = (bw.disk_read_gbs or 1.0) * GB
    linear_flops = 2 * spec.num_layers * spec.layer_linear_params
    pair_flops = 4 * spec.num_layers * spec.num_heads * spec.head_dim
    resident_cap = max(0, gpu_tokens - chunk)  # earlier tokens that stay on the GPU during a chunk
    total = 2 * spec.hidden_size * spec.vocab_size / flop_rate
    for start in range(0, context_len, chunk):
        n = min(chunk, context_len - start)
        flops = linear_flops * n + pair_flops * (n * start + n * (n + 1) // 2)
        resident = min(start, resident_cap)
        cold = start - resident
        compute = max(flops / flop_rate, (weight_bytes + resident * kvpt) / hbm)
        newly_cold = max(0, start + n - resident_cap) - max(0, start - resident_cap)
        disk_bytes = max(0, cold - cpu_tokens) * kvpt  # the disk part, read back every chunk
        disk_bytes += (max(0, cold + newly_cold - cpu_tokens) - max(0, cold - cpu_tokens)) * kvpt  # spilled
        transfer = max(cold * kvpt / h2d, newly_cold * kvpt / d2h) + disk_bytes / disk
        total += max(compute, transfer)
    return total


def _blocks_tokens(num_bytes: int, block_bytes: int, block_size: int) -> int:
    return max(0, num_bytes) // block_bytes * block_size


def _tier_tokens(exact_blocks: int | None, num_bytes: int, block_bytes: int, block_size: int) -> int:
    """A tier's tokens: the exact block count when one was set, else the whole blocks that fit."""
    if exact_blocks is not None:
        return exact_blocks * block_size
    return _blocks_tokens(num_bytes, block_bytes, block_size)


def _round_up(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size) * block_size


def _gpu_budget(request: PlanRequest, weight_bytes: int) -> tuple[int, int, int, int, int, int]:
    """(usable, activation, graph, slack, runtime, kv bytes left) on the device that holds the pool.

    Measured figures (weights, activation peak, runtime) replace the estimates when the engine
    gives them: the engine sizes its pools with this very function after loading."""
    spec, kv_bytes = request.spec, request.kv_dtype_bytes
    usable = int(request.vram_budget_bytes * request.gpu_memory_utilization)
    act_bytes = request.weight_dtype_bytes
    num_sampled = min(request.max_num_seqs, request.max_num_batched_tokens)
    activation = request.measured_activation_bytes
    if activation is None:
        activation = activation_peak_bytes(
            spec, request.max_num_batched_tokens, num_sampled, act_bytes, kv_bytes
        )
    graph = slack = runtime = 0
    if request.device == "cuda":
        if not request.enforce_eager:
            batch = min(request.max_num_seqs, MAX_GRAPH_BATCH)
            graph = CUDA_GRAPH_BASE_BYTES + activation_peak_bytes(spec, batch, batch, act_bytes, kv_bytes, 0)
        slack = max(ALLOCATOR_SLACK_MIN_BYTES, int(usable * ALLOCATOR_SLACK_FRACTION))
        runtime = (
            RUNTIME_RESERVE_BYTES
            if request.measured_runtime_bytes is None
            else request.measured_runtime_bytes
        )
    left = usable - weight_bytes - activation - graph - slack - runtime
    if request.gpu_kv_budget_bytes is not None:  # a fixed KV size, never more than what is left
        left = min(left, request.gpu_kv_budget_bytes)
    return usable, activation, graph, slack, runtime, left


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
    kvpt = spec.kv_bytes_per_token(request.kv_dtype_bytes)
    block_bytes = kvpt * bs
    usable, activation, graph, slack, runtime, gpu_left = _gpu_budget(request, weight_bytes)
    gpu_tokens = _tier_tokens(request.gpu_kv_blocks, gpu_left, block_bytes, bs)
    cpu_tokens = _tier_tokens(request.cpu_kv_blocks, request.ram_budget_bytes, block_bytes, bs)
    disk_tokens = _tier_tokens(request.disk_kv_blocks, request.disk_budget_bytes, block_bytes, bs)
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
    floor = decode_floor(
        weight_bytes,
        on_gpu * kvpt,
        on_cpu * kvpt,
        on_disk * kvpt,
        bw,
        request.cold_attention,
        spec.num_layers,
        request.offloaded_weight_bytes,
        request.weight_read_fraction,
    )
    ttft = prefill_seconds(spec, ctx, chunk, gpu_tokens, cpu_tokens, weight_bytes, kvpt, bw)
    fits = gpu_left >= 0 and gpu_tokens > 0 and unplaced == 0 and seqs >= 1
    return MemoryPlan(
        preset=request.preset,
        request=request,
        bandwidths=bw,
        usable_vram_bytes=usable,
        weight_bytes=weight_bytes,
        offloaded_weight_bytes=request.offloaded_weight_bytes,
        kv_bytes_per_token=kvpt,
        block_bytes=block_bytes,
        activation_peak_bytes=activation,
        cuda_graph_reserve_bytes=graph,
        allocator_slack_bytes=slack,
        runtime_reserve_bytes=runtime,
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
