"""What the user asks the planner for: `PlanRequest`, a plain frozen record of the model's shapes,
the budgets, the context and the engine's flags (as `kvspill plan` or start-up give them).

Its own module so that the plan's satellites (`gpu_budget`, `sparse`, `choices`) take it as a
record without importing the arithmetic that uses them. Invariants: no torch, no I/O; validated
in `__post_init__` with messages that name the flag to change; derived sizes are properties
(bytes per token, weight bytes), never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvspill.errors import InvalidParameterError
from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.choices import ChoiceFlags, DeviceFacts, RuntimeChoices, resolve_choices
from kvspill.plan.cold_rates import cpu_kv_rate
from kvspill.plan.spec import DTYPE_BYTES, ModelSpec
from kvspill.plan.units import GiB
from kvspill.plan.weights import (
    SCALE_PAIR_MODES,
    WEIGHT_QUANTIZATIONS,
    cpu_gguf_read_share,
    q4k_matmul_bytes,
    scale_pair_bytes,
    scale_pairs_possible,
    stored_weight_bytes,
    weight_read_gbs,
)

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
    sparse_graphs: bool = True  # sparse decode steps may replay CUDA graphs (KVSPILL_SPARSE_CUDA_GRAPHS)
    mixed_graphs: bool = True  # mixed steps may replay CUDA graphs (KVSPILL_MIXED_CUDA_GRAPHS)
    tp_graphs: bool = True  # tensor-parallel steps may replay CUDA graphs (KVSPILL_TP_CUDA_GRAPHS)
    rope_positions: int | None = None  # positions of the model's RoPE table (None: context_len)
    rope_scaling: str | None = None  # --rope-scaling's type ("yarn", ...), None: the model's own RoPE
    # Q4_K scale pairs for batched steps (KVSPILL_SCALE_PAIRS, env.scale_pairs_mode): "auto" (where a
    # context fits the GPU tier beside them, arithmetic.compute_plan), "on" or "off"
    scale_pairs: str = "auto"
    measured_scale_pair_bytes: int | None = None  # what the loaded model holds (engine/setup.py)

    def __post_init__(self) -> None:
        def check(ok: bool, param: str, message: str) -> None:
            if not ok:
                raise InvalidParameterError(param, message)

        check(
            self.scale_pairs in SCALE_PAIR_MODES,
            "scale_pairs",
            f"KVSPILL_SCALE_PAIRS must be 0, 1 or unset (auto), got {self.scale_pairs!r}",
        )
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
        return self.stored_weight_bytes - self.offloaded_weight_bytes + slots + self.scale_pair_bytes

    @property
    def weight_read_bytes(self) -> int:
        """The weights a step streams: those on the GPU less the scale pairs (a one-token step's
        GEMV reads the blocks alone; the batched steps' rates, plan/weights, are fit to the
        blocks' bytes) and less a gathered token embedding (`gathered_embedding_bytes`)."""
        return max(0, self.weight_bytes - self.scale_pair_bytes - self.gathered_embedding_bytes)

    @property
    def gathered_embedding_bytes(self) -> int:
        """An untied token embedding's bytes where decode reads the weights at HBM's rate (dense
        and fp8 weights; the embedding is held at weight_dtype): a step gathers one row of it a
        token and streams none. Counting it planned the 8B bf16 / fp8 rows at 8K 0.85-0.86 of an
        H100's measured speed, 0.95 of an H200's (docs/performance-history.md, 2026-12-07). The
        quantized formats' rates (plan/weights.QUANT_READ_GBS) are fit to all of a file's bytes,
        its embedding included, so theirs stays counted."""
        if self.spec.tie_word_embeddings or self.weight_read_gbs is not None:
            return 0
        return self.spec.vocab_size * self.spec.hidden_size * self.weight_dtype_bytes

    @property
    def scale_pair_bytes(self) -> int:
        """The Q4_K weights' scale pairs the engine keeps beside them for batched steps: measured,
        else estimated where they may be kept (plan/weights.scale_pairs_possible, not "off")."""
        if self.measured_scale_pair_bytes is not None:
            return self.measured_scale_pair_bytes
        if self.scale_pairs == "off" or not scale_pairs_possible(self.device, self.max_num_seqs):
            return 0
        return scale_pair_bytes(q4k_matmul_bytes(self.spec, self.quantization))

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
    def cpu_gguf_read_share(self) -> float | None:
        """The CPU GGUF kernel's read rate as a share of the CPU's GEMV rate; None: dense weights."""
        return cpu_gguf_read_share(self.spec, self.quantization)

    @property
    def weight_read_gbs(self) -> float | None:
        """GB/s decode reads the weights at where a kernel bounds it (quantized); None: HBM's."""
        return weight_read_gbs(self.spec, self.quantization)

    @property
    def kv_format(self) -> str:
        """The KV values' format as the CPU kernel's rates name it (plan.costs.CPU_ATTN_RATE_VS_BF16);
        `auto` KV is the weights' dtype (fp16 weights: fp16 KV, as the engine's pool holds it)."""
        if self.kv_dtype == "int8":
            return "int8"
        if self.kv_dtype in ("float16", "fp16") or (
            self.kv_dtype == "auto" and self.weight_dtype in ("float16", "fp16")
        ):
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

    def runtime_choices(self, bandwidths: Bandwidths) -> RuntimeChoices:
        """The engine's runtime choices for this request (plan/choices.py): the flags and facts
        it carries, `bandwidths` as the calibration where they were measured (`measured_at`)."""
        flags = ChoiceFlags(
            cold_attention=self.cold_attention,
            enforce_eager=self.enforce_eager,
            sparse_cache_seqs=self.sparse_cache_seqs,
            block_size=self.block_size,
            max_num_seqs=self.max_num_seqs,
            gpu_memory_utilization=self.gpu_memory_utilization,
        )
        facts = DeviceFacts(
            self.device,
            self.vram_budget_bytes,
            self.tensor_parallel_size,
            tp_graphs=self.tp_graphs,
            stream_graphs=self.stream_graphs,
            sparse_graphs=self.sparse_graphs,
            mixed_graphs=self.mixed_graphs,
        )
        calibration = bandwidths if bandwidths.measured_at is not None else None
        return resolve_choices(
            flags, facts, calibration, kv_format=self.kv_format, head_dim=self.spec.head_dim
        )
