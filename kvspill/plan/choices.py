"""One record of the engine's runtime choices: `resolve_choices(flags, device facts, calibration)
-> RuntimeChoices`, read by `kvspill plan`, start-up's plan and the engine alike.

What it decides, once per engine: the cold path (`--cold-attention` with "auto" resolved), the
split thresholds (a step splits only with enough cold bytes per layer), the cold path's rates at
the pool's KV format, which CUDA graphs are captured (decode, stream, sparse) or why not, the
block size and the byte ceiling of the VRAM budget. What depends on a step's bytes (split or
stream for this step) stays per step, from the thresholds here (`SplitThresholds.splits`).

Invariants: pure, no torch, no I/O (the caller reads the environment and the card into
`DeviceFacts`, once); the plan and the engine never re-derive a field of this record: the plan
builds it from its `PlanRequest` (`PlanRequest.runtime_choices`), the engine from its config
(`engine/setup.py`), through this one function; a CPU test holds the two equal over a grid of
configurations (tests/plan/test_choices_agree.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from kvspill.config import EngineConfig
from kvspill.env import cuda_graphs_on
from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.cold_rates import (
    SplitThresholds,
    auto_split_min_layer_bytes,
    auto_uses_split,
    cpu_kv_rate,
    cpu_layer_seconds,
    graphed_split_min_layer_bytes,
)

MAX_GRAPH_BATCH = 256  # largest decode batch captured in a CUDA graph (runner/cuda_graphs.py)


class ColdPath(StrEnum):
    """Where decode rows attend their cold (cpu/disk) KV; one backend each (attention/cold/)."""

    STREAM = "stream"  # copied to the GPU in double-buffered chunks
    CPU = "cpu"  # attended in RAM by the CPU kernel
    SPLIT = "split"  # both at once, shared so that both parts end together
    SPARSE = "sparse"  # only the blocks the queries select, gathered to the GPU


class ColdGraphs(StrEnum):
    """Which CUDA graphs replay decode steps with one cold sequence (runner/cold_graphs.py)."""

    STREAM = "stream"  # runner/stream_graphs.py
    SPARSE = "sparse"  # runner/sparse_graphs.py


# The least prefill a step carries while requests decode (engine/itl_budget.py), which is also the
# chunk the mixed-step CUDA graphs hold (runner/mixed_graphs.py): one figure, so those steps replay.
PREFILL_FLOOR_BLOCKS = 4
PREFILL_FLOOR_TOKENS = 256
# Mixed steps with more decodes than this run eagerly: their decode rows make the step long anyway.
# (At 16, 32-sequence runs still had eager mixed steps: ITL p99 3-4x p50, H200 2026-12-02.)
MIXED_GRAPH_DECODES = 64
# Prefill chunks a mixed step holds: a chunk may end one prompt and start the next.
MIXED_GRAPH_PREFILLS = 2


def prefill_floor_tokens(block_size: int) -> int:
    """Prefill tokens a step carries at least while requests decode (a GPU chunk below a few
    hundred tokens wastes its matmuls), and the mixed graphs' chunk."""
    return max(PREFILL_FLOOR_BLOCKS * block_size, PREFILL_FLOOR_TOKENS)


def batch_buckets(max_num_seqs: int) -> list[int]:
    """The decode batch sizes captured in CUDA graphs up to `max_num_seqs` (a step pads to the next)."""
    buckets = [b for b in (1, 2, 4, 8, 16, 24, 32) if b <= max_num_seqs]
    b = 48
    while b <= max_num_seqs:
        buckets.append(b)
        b += 16
    if buckets[-1] != max_num_seqs:
        buckets.append(max_num_seqs)
    return buckets


def mixed_decodes(max_num_seqs: int) -> int:
    """The largest decode count the mixed graphs hold."""
    return min(MIXED_GRAPH_DECODES, max_num_seqs)


def mixed_buckets(decode_buckets: list[int], max_decodes: int) -> list[int]:
    """The decode buckets the mixed graphs capture: the decode graphs' up to `max_decodes`."""
    return [b for b in decode_buckets if b <= max_decodes]


@dataclass(frozen=True)
class DeviceFacts:
    """What the choices need to know of the machine, read once by the caller."""

    device_type: str = "cuda"  # where the "gpu" tier lives: "cuda" or "cpu"
    total_bytes: int | None = None  # the card's memory (None: not known, or no card)
    tensor_parallel_size: int = 1
    # KVSPILL_{TP,STREAM,SPARSE,MIXED}_CUDA_GRAPHS (env.cuda_graphs_on): False runs those steps eagerly
    tp_graphs: bool = True
    stream_graphs: bool = True
    sparse_graphs: bool = True
    mixed_graphs: bool = True
    # the cpu tier is pinned: cold graphs read it in place (known after allocation; plans assume it)
    cpu_pool_pinned: bool = True

    @classmethod
    def read(
        cls, device_type: str, total_bytes: int | None = None, tensor_parallel_size: int = 1
    ) -> DeviceFacts:
        """Facts with the graph switches as the environment sets them now."""
        return cls(
            device_type,
            total_bytes,
            tensor_parallel_size,
            tp_graphs=cuda_graphs_on("TP"),
            stream_graphs=cuda_graphs_on("STREAM"),
            sparse_graphs=cuda_graphs_on("SPARSE"),
            mixed_graphs=cuda_graphs_on("MIXED"),
        )


@dataclass(frozen=True)
class ChoiceFlags:
    """The flags the choices depend on, as `EngineConfig` and `PlanRequest` both give them."""

    cold_attention: str  # --cold-attention: auto, cpu, stream, split or sparse
    enforce_eager: bool  # --enforce-eager, or --cpu-offload-gb (offload swaps weights: no graphs)
    sparse_cache_seqs: int  # sequences of the sparse block cache (0 unless sparse)
    block_size: int
    max_num_seqs: int = 1
    vram_budget_bytes: int | None = None  # --vram-budget; None: `gpu_memory_utilization` of the card
    gpu_memory_utilization: float = 1.0

    @classmethod
    def of_config(cls, config: EngineConfig) -> ChoiceFlags:
        return cls(
            cold_attention=config.cold_attention,
            enforce_eager=config.enforce_eager or config.cpu_offload_gb > 0,
            sparse_cache_seqs=config.sparse_cache_groups(),
            block_size=config.block_size,
            max_num_seqs=config.max_num_seqs,
            vram_budget_bytes=config.vram_budget_bytes,
            gpu_memory_utilization=config.gpu_memory_utilization,
        )


@dataclass(frozen=True)
class ColdRates:
    """The calibrated rates the split divides by, at the pool's KV format (None: not calibrated)."""

    cpu_attn_gbs: float | None = None  # the CPU kernel over this KV format and head size
    stream_gbs: float | None = None  # the stream path (calibration stream_gbs, else pinned H2D)
    cpu_layer_s: float = 0.0  # the CPU path's fixed time per layer


@dataclass(frozen=True)
class RuntimeChoices:
    """Everything the engine decides once at start-up that the plan must agree with."""

    cold_path: ColdPath
    exact_path: ColdPath  # the exact path of rows sparse does not select for (prefill); else cold_path
    auto_split: bool  # "auto" resolved to split (start-up says why)
    split: SplitThresholds
    rates: ColdRates
    cpu_workers: int  # threads running the CPU partials (1 on a GPU, where the GPU waits by itself)
    decode_graphs: bool  # decode-only steps without cold blocks replay CUDA graphs (runner/cuda_graphs.py)
    graph_batch: int  # the largest decode batch captured (0: no graphs)
    cold_graphs: ColdGraphs | None  # decode steps of one cold sequence replay these
    # mixed steps (decodes beside a short prefill chunk) replay graphs of this many rows (0: none;
    # runner/mixed_graphs.py): MIXED_GRAPH_DECODES decode rows and a prefill_floor_tokens() chunk
    mixed_graph_tokens: int
    sparse_eager_reason: str | None  # sparse without graphs: why (None: graphs, or not sparse)
    block_size: int
    vram_ceiling_bytes: int | None  # CUDA: what the process may hold on the card (None: no card)

    @property
    def eager(self) -> bool:
        """No CUDA graph at all (CPU device, --enforce-eager, offload, KVSPILL_TP_CUDA_GRAPHS=0)."""
        return not self.decode_graphs


def vram_budget(
    vram_budget_bytes: int | None, gpu_memory_utilization: float, total: int | None
) -> tuple[int, float] | None:
    """(budget bytes, the share of it the process may use) on a card of `total` bytes:
    `--vram-budget` is the ceiling itself (the share 1); without one, `--gpu-memory-utilization`
    of the card; None where neither is known."""
    if vram_budget_bytes is not None:
        return vram_budget_bytes, 1.0
    return None if total is None else (total, gpu_memory_utilization)


def vram_ceiling_bytes(
    vram_budget_bytes: int | None, gpu_memory_utilization: float, total: int | None
) -> int | None:
    """What the process may hold on the card (`vram_budget`'s bytes times its share)."""
    budget = vram_budget(vram_budget_bytes, gpu_memory_utilization, total)
    return None if budget is None else int(budget[0] * budget[1])


def resolve_choices(
    config: EngineConfig | ChoiceFlags,
    facts: DeviceFacts,
    calibration: Bandwidths | None,
    *,
    kv_format: str = "bf16",
    head_dim: int = 128,
) -> RuntimeChoices:
    """The runtime choices of an engine of `config` on `facts`'s machine; `calibration` is the
    saved one (None: not calibrated), `kv_format` the pool's (plan.cold_rates.CPU_ATTN_RATE_VS_BF16)."""
    flags = config if isinstance(config, ChoiceFlags) else ChoiceFlags.of_config(config)
    on_cuda = facts.device_type == "cuda"
    rates = _rates(calibration, kv_format, head_dim)
    path, exact, auto_split = _cold_path(flags, facts, calibration, rates)
    decode_graphs = (
        on_cuda and not flags.enforce_eager and (facts.tensor_parallel_size == 1 or facts.tp_graphs)
    )
    sparse_reason = _sparse_eager_reason(flags, facts) if path is ColdPath.SPARSE else None
    cold_graphs = None
    if decode_graphs and facts.tensor_parallel_size == 1 and facts.cpu_pool_pinned:
        if path is ColdPath.SPARSE:
            cold_graphs = ColdGraphs.SPARSE if sparse_reason is None else None
        elif path in (ColdPath.STREAM, ColdPath.SPLIT) and facts.stream_graphs:
            cold_graphs = ColdGraphs.STREAM
    split = SplitThresholds()
    if auto_split:
        assert calibration is not None and rates.cpu_attn_gbs is not None
        least = auto_split_min_layer_bytes(calibration)
        graphed: int | float = least
        if cold_graphs is ColdGraphs.STREAM:
            graphed = graphed_split_min_layer_bytes(
                calibration, rates.cpu_attn_gbs, rates.cpu_layer_s, kv_format
            )
        split = SplitThresholds(least, graphed)
    return RuntimeChoices(
        cold_path=path,
        exact_path=exact,
        auto_split=auto_split,
        split=split,
        rates=rates,
        cpu_workers=1 if path in (ColdPath.SPLIT, ColdPath.CPU) and on_cuda else 0,
        decode_graphs=decode_graphs,
        graph_batch=min(flags.max_num_seqs, MAX_GRAPH_BATCH) if decode_graphs else 0,
        cold_graphs=cold_graphs,
        mixed_graph_tokens=(
            mixed_decodes(flags.max_num_seqs) + prefill_floor_tokens(flags.block_size)
            if decode_graphs and facts.tensor_parallel_size == 1 and facts.mixed_graphs
            else 0
        ),
        sparse_eager_reason=sparse_reason,
        block_size=flags.block_size,
        vram_ceiling_bytes=(
            vram_ceiling_bytes(flags.vram_budget_bytes, flags.gpu_memory_utilization, facts.total_bytes)
            if on_cuda
            else None
        ),
    )


def _rates(calibration: Bandwidths | None, kv_format: str, head_dim: int) -> ColdRates:
    if calibration is None:
        return ColdRates()
    cpu = calibration.cpu_attn_gbs
    return ColdRates(
        cpu_attn_gbs=cpu_kv_rate(cpu, kv_format, head_dim) if cpu else None,
        stream_gbs=calibration.stream_gbs or calibration.h2d_gbs,
        cpu_layer_s=cpu_layer_seconds(calibration),
    )


def cold_path_of(flag: str, device_type: str) -> tuple[ColdPath, ColdPath]:
    """(cold path, exact path) of `--cold-attention flag` without a calibration: "auto" is
    "cpu" off CUDA and "stream" on it; "sparse" runs its prefill rows on that same exact path."""
    plain = ColdPath.STREAM if device_type == "cuda" else ColdPath.CPU
    if flag == "auto":
        return plain, plain
    if flag == "sparse":
        return ColdPath.SPARSE, plain
    return ColdPath(flag), ColdPath(flag)


def _cold_path(
    flags: ChoiceFlags, facts: DeviceFacts, calibration: Bandwidths | None, rates: ColdRates
) -> tuple[ColdPath, ColdPath, bool]:
    """(cold path, exact path, whether "auto" chose split): `cold_path_of`, except that "auto"
    on CUDA is "split" where the calibration says the CPU pays at the pool's format
    (auto_uses_split), on one GPU (split under tensor parallelism was never measured)."""
    path, exact = cold_path_of(flags.cold_attention, facts.device_type)
    if (
        flags.cold_attention == "auto"
        and facts.device_type == "cuda"
        and facts.tensor_parallel_size == 1
        and calibration is not None
        and rates.cpu_attn_gbs is not None
        and auto_uses_split(replace(calibration, cpu_attn_gbs=rates.cpu_attn_gbs))
    ):
        return ColdPath.SPLIT, ColdPath.SPLIT, True
    return path, exact, False


def _sparse_eager_reason(flags: ChoiceFlags, facts: DeviceFacts) -> str | None:
    """Why sparse decode steps run eagerly (2-3x slower, H200 W3 128K), or None: they replay
    graphs (runner/sparse_graphs.py) unless a step's own blocks say otherwise (disk blocks)."""
    reasons = {
        "not on a GPU": facts.device_type != "cuda",
        "--enforce-eager": flags.enforce_eager,
        "tensor parallelism": facts.tensor_parallel_size > 1,
        "--sparse-cache-seqs 0": flags.sparse_cache_seqs == 0,
        "KVSPILL_SPARSE_CUDA_GRAPHS=0": not facts.sparse_graphs,
        "the cpu tier is not pinned": not facts.cpu_pool_pinned,
    }
    return next((why for why, on in reasons.items() if on), None)
