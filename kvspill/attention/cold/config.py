"""The cold-attention path's configuration and a step's input per sequence (`ColdSeq`): what the
engine chose (`--cold-attention`, `--sparse-budget-tokens`, `--sparse-cache-seqs`) and the
runner hands over; the paths themselves are in `attention/cold/dispatch.py` and the modules it names.

Invariant: nothing here decides a path or a threshold: `cold_config` copies them from the
engine's one record of runtime choices (`plan/choices.py`), which the plan reads too."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.config import COLD_ATTENTION, EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.choices import ColdPath, DeviceFacts, RuntimeChoices, cold_path_of, resolve_choices
from kvspill.plan.cold_rates import SplitThresholds, split_cpu_share
from kvspill.plan.costs import COLD_STAGE_TOKENS

logger = logging.getLogger(__name__)

COLD_PATHS = COLD_ATTENTION  # --cold-attention's values
# On a GPU the engine thread keeps launching the GPU's work while the CPU kernel runs: the
# kernel leaves it (and the copy threads) this many cores. W3 128K split on a 16-core H200 host,
# 14 threads against 16: 8.49 against 7.83 tok/s with bf16 KV, 17.16 against 13.00 with fp8
# (bench/results/2026-11-27-h200-cpu-kernel/, call C).
GPU_HOST_SPARE_CORES = 2


def default_cpu_threads(device: torch.device, cpu_workers: int) -> int | None:
    """Threads of the CPU kernel when --cpu-attention-threads is not given: on a GPU with a CPU
    worker, torch's count less GPU_HOST_SPARE_CORES (at least 1); else None (torch's count)."""
    if device.type != "cuda" or not cpu_workers:
        return None
    return max(1, torch.get_num_threads() - GPU_HOST_SPARE_CORES)


@dataclass(frozen=True)
class ColdAttentionConfig:
    path: str = "auto"
    cpu_fraction: float | None = None  # split: share of cold blocks on the CPU; None: from bandwidths
    cpu_attn_gbs: float | None = None  # measured CPU attention rate (calibration), GB/s of KV
    h2d_gbs: float | None = (
        None  # measured rate of the stream path (calibration stream_gbs, else pinned H2D), GB/s
    )
    # The CPU path's fixed time per layer (calibration cpu_attn_layer_s): with both rates, split
    # sizes each step's CPU share so that both parts end together (`cpu_share_for`).
    cpu_layer_s: float = 0.0
    cpu_chunk_blocks: int = 256  # blocks gathered per CPU step: bounds host temporaries
    # Blocks per device staging buffer (two of them). Each chunk costs ~20 host launches per
    # layer, so small chunks leave the copy stream waiting for the host: on an H200 host, 64
    # streamed 10-12 GB/s, 256 38-42; the engine passes the plan's COLD_STAGE_TOKENS (1024 blocks).
    stream_chunk_blocks: int = 1024
    cpu_workers: int = 0  # threads running CPU partials; 0: the calling thread, after the GPU kernels
    # Threads of the CPU kernel; None: torch's count when the backend is built (the engine's
    # pre-flight sets it from --cpu-attention-threads). Read once: a worker thread's own OpenMP
    # default would be every core.
    cpu_threads: int | None = None
    max_rows_per_query: int = 64  # stream: query rows (tokens x GQA group) folded into one kernel query
    # sparse: cold tokens each decode row attends per layer (whole blocks, at least one); the
    # gpu-resident sink blocks and hot window come on top, exact.
    sparse_budget_tokens: int = 4096
    # sparse: decode requests whose chosen blocks stay cached on the device between steps
    # (`attention/sparse/cache.py`; each costs the budget's KV bytes); 0 turns the cache off.
    sparse_cache_seqs: int = 0
    # sparse: the queries of each prompt's last `sparse_prompt_window` tokens choose
    # `sparse_prompt_share` of the budget (`attention/sparse/anchor.py`); 0: the step's query chooses all.
    sparse_prompt_window: int = 0
    sparse_prompt_share: float = 0.5
    max_seq_blocks: int = 0  # blocks of the longest sequence (the cache's map size); 0: no cache
    # split: a step whose decode rows have fewer cold bytes per layer than this streams them all
    # (the CPU's hand-over would cost more than its share saves); "auto" on a GPU sets it
    # (plan/cold_rates.py, AUTO_SPLIT_MIN_STREAM_S), 0 splits every step.
    min_split_layer_bytes: int = 0
    # ... and this many where the step could otherwise replay a stream graph (runner/stream_graphs.py),
    # which streams faster than an eager step (plan/cold_rates.py, graphed_split_min_layer_bytes).
    min_split_layer_bytes_graphed: int | float = 0

    def __post_init__(self) -> None:
        if self.path not in COLD_PATHS:
            raise InvalidParameterError(
                "cold_path", f"cold attention path must be one of {COLD_PATHS}, got {self.path!r}"
            )
        if self.cpu_fraction is not None and not 0.0 <= self.cpu_fraction <= 1.0:
            raise InvalidParameterError(
                "cold_path", f"cpu_fraction must be in [0, 1], got {self.cpu_fraction}"
            )
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise InvalidParameterError(
                "cold_path", f"cpu_threads must be at least 1, got {self.cpu_threads}"
            )
        for name in ("cpu_chunk_blocks", "stream_chunk_blocks", "max_rows_per_query", "sparse_budget_tokens"):
            if getattr(self, name) < 1:
                raise InvalidParameterError(
                    "cold_path", f"{name} must be at least 1, got {getattr(self, name)}"
                )
        if self.sparse_cache_seqs < 0:
            raise InvalidParameterError(
                "cold_path", f"sparse_cache_seqs must not be negative, got {self.sparse_cache_seqs}"
            )
        if self.sparse_prompt_window < 0:
            raise InvalidParameterError(
                "cold_path", f"sparse_prompt_window must not be negative, got {self.sparse_prompt_window}"
            )
        if not 0.0 <= self.sparse_prompt_share <= 1.0:
            raise InvalidParameterError(
                "cold_path", f"sparse_prompt_share must be in [0, 1], got {self.sparse_prompt_share}"
            )
        if self.cpu_workers < 0:
            raise InvalidParameterError(
                "cold_path", f"cpu_workers must not be negative, got {self.cpu_workers}"
            )

    def cold_paths(self, device: torch.device) -> tuple[ColdPath, ColdPath]:
        """(cold path, exact path) on `device` (`plan.choices.cold_path_of`): "auto" as the
        engine left it (not split) is "stream" on CUDA, "cpu" elsewhere; "sparse" runs its
        prefill rows on that exact path."""
        return cold_path_of(self.path, device.type)

    def resolved_path(self, device: torch.device) -> str:
        """The exact path; "sparse" runs its prefill rows on the one "auto" picks."""
        return self.cold_paths(device)[1].value

    @property
    def split_thresholds(self) -> SplitThresholds:
        return SplitThresholds(self.min_split_layer_bytes, self.min_split_layer_bytes_graphed)

    def resolved_cpu_fraction(self) -> float:
        """cost(cold) = max(cpu_bytes / B_cpu, streamed / B_h2d) is least when the shares follow the rates."""
        if self.cpu_fraction is not None:
            return self.cpu_fraction
        if self.cpu_attn_gbs and self.h2d_gbs:
            return self.cpu_attn_gbs / (self.cpu_attn_gbs + self.h2d_gbs)
        return 0.5

    def cpu_share_for(self, layer_bytes: int) -> float:
        """Split's CPU share of a step whose decode rows have `layer_bytes` of cold KV per layer:
        the fixed share when one was given or the rates are unknown, else the one at which the
        CPU part (its bytes and its fixed time per layer) ends with the streamed part
        (`plan.cold_rates.split_cpu_share`, the plan's rule)."""
        if self.cpu_fraction is not None or not (self.cpu_attn_gbs and self.h2d_gbs):
            return self.resolved_cpu_fraction()  # the given share, else 1/2
        return split_cpu_share(layer_bytes, self.h2d_gbs, self.cpu_attn_gbs, self.cpu_layer_s)


@dataclass(frozen=True)
class ColdSeq:
    """A sequence of the step that has cold blocks (built by the runner)."""

    token_start: int  # its first query row in the step's q
    num_tokens: int  # its query rows this step
    block_tiers: np.ndarray  # [num_cold] TIER_CPU or TIER_DISK, in logical order
    block_ids: np.ndarray  # [num_cold] int64, ids within each block's tier
    # sparse's block cache: the blocks' logical numbers and the request (None: not cached)
    block_index: np.ndarray | None = None
    req_id: str | None = None


# KV dtypes as the CPU kernel's rates name them (plan.cold_rates.CPU_ATTN_RATE_VS_BF16)
_KV_FORMATS = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float8_e4m3fn: "fp8",
    torch.float8_e5m2: "fp8",
    torch.int8: "int8",
}


def kv_format_of(kv_dtype: torch.dtype) -> str:
    """The pool's KV format as the plan's rates name it."""
    return _KV_FORMATS[kv_dtype]


def engine_cold_config(
    config: EngineConfig,
    calibration: Bandwidths | None,
    max_seq_blocks: int,
    device: torch.device,
    kv_dtype: torch.dtype = torch.bfloat16,
    head_dim: int = 128,
    stream_graphs: bool = False,
) -> ColdAttentionConfig:
    """The cold-attention configuration of an engine of `config` on `device`, through the one
    record (`plan.choices.resolve_choices`): `stream_graphs`, the runner replays stream graphs,
    so "auto" splits fewer steps that could replay one. Start-up resolves the record itself
    (engine/setup.py) and calls `cold_config`; this is that path in one call."""
    facts = DeviceFacts(
        device.type, tensor_parallel_size=config.tensor_parallel_size, stream_graphs=stream_graphs
    )
    choices = resolve_choices(config, facts, calibration, kv_format=kv_format_of(kv_dtype), head_dim=head_dim)
    return cold_config(config, choices, device, max_seq_blocks)


def cold_config(
    config: EngineConfig,
    choices: RuntimeChoices,
    device: torch.device,
    max_seq_blocks: int,
) -> ColdAttentionConfig:
    """The cold-attention configuration the runner's backend takes, copied from the record:
    the path ("auto" stays "auto" unless it chose split), the split thresholds and rates, the
    CPU worker and threads, and the flags' sparse knobs."""
    if choices.auto_split:
        _say_why_auto_splits(choices)
    return ColdAttentionConfig(
        path=ColdPath.SPLIT.value if choices.auto_split else config.cold_attention,
        min_split_layer_bytes=choices.split.min_layer_bytes,
        min_split_layer_bytes_graphed=choices.split.min_layer_bytes_graphed,
        cpu_attn_gbs=choices.rates.cpu_attn_gbs,
        h2d_gbs=choices.rates.stream_gbs,
        cpu_layer_s=choices.rates.cpu_layer_s,
        # On CUDA the CPU share runs on a worker thread from when the layer's q is down (`begin`)
        # while this thread launches the stream share and the rest of the layer; the GPU waits
        # for its result (storage/stream_flag.py). On the CPU device the kernel has every core.
        cpu_workers=choices.cpu_workers,
        cpu_threads=config.cpu_attention_threads or default_cpu_threads(device, choices.cpu_workers),
        # The plan reserves two staging buffers of COLD_STAGE_TOKENS per layer: use all of it.
        # Fewer, larger chunks keep the host ahead of the H2D gathers (W2 3 x 32K on an H200:
        # 256-block chunks left the copy stream idle 45% of a step waiting for launches).
        stream_chunk_blocks=max(1, COLD_STAGE_TOKENS // config.block_size),
        sparse_budget_tokens=config.sparse_budget_tokens,
        sparse_cache_seqs=config.sparse_cache_groups(),
        sparse_prompt_window=config.sparse_prompt_window,
        sparse_prompt_share=config.sparse_prompt_share,
        max_seq_blocks=max_seq_blocks + 1,
    )


def _say_why_auto_splits(choices: RuntimeChoices) -> None:
    """Once at start: "auto" splits, at which rates and from how many bytes per layer."""
    graphed_min = choices.split.min_layer_bytes_graphed
    graphed = (
        ""
        if graphed_min == choices.split.min_layer_bytes
        else "; a step that could replay a stream graph always streams"
        if graphed_min == float("inf")
        else f"; {graphed_min / 1e6:.0f} MB where the step could replay a stream graph"
    )
    logger.info(
        "--cold-attention auto: split (the calibration measured the CPU path at %.1f GB/s over "
        "this KV and the stream path at %.1f; steps with under %.0f MB of cold KV per layer "
        "stream it all%s)",
        choices.rates.cpu_attn_gbs,
        choices.rates.stream_gbs,
        choices.split.min_layer_bytes / 1e6,
        graphed,
    )
