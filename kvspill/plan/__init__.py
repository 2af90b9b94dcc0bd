"""The memory plan: what fits where, and how fast it will run, before anything is loaded.

The public face of the planner, shared by `kvspill plan` and engine start-up: `make_plan` (the
arithmetic of `plan/arithmetic.py` plus advice from `plan/report.py`), the named presets
(`default`, `extended`, `extreme`) sized for a context on this host, and figures for known cards.

Invariants:
- No torch, no I/O: the caller passes bandwidths, host RAM and free disk in.
- `make_plan` never raises for a plan that does not fit: `fits=False` and `advice` say what to
  change, each line with a flag and a number that the same arithmetic checked.
"""

from __future__ import annotations

from dataclasses import replace

from kvspill.config import EngineConfig, rope_type_of
from kvspill.env import cuda_graphs_on, scale_pairs_mode
from kvspill.plan.arithmetic import (
    MemoryPlan,
    PlanRequest,
    compute_plan,
)
from kvspill.plan.bandwidths import DEFAULT_BANDWIDTHS, RATE_FIELDS, Bandwidths
from kvspill.plan.choices import ChoiceFlags
from kvspill.plan.costs import DecodeFloor
from kvspill.plan.report import advise, format_plan_table, notes_for, plan_to_json
from kvspill.plan.spec import ModelSpec
from kvspill.plan.units import GiB, format_bytes, format_tokens, parse_bytes

__all__ = [
    "DEFAULT_BANDWIDTHS",
    "KNOWN_GPU_BANDWIDTHS",
    "RATE_FIELDS",
    "Bandwidths",
    "DecodeFloor",
    "MemoryPlan",
    "PlanRequest",
    "bandwidths_for_gpu",
    "known_gpu",
    "compute_plan",
    "describe_fit",
    "format_plan_table",
    "make_plan",
    "parse_bytes",
    "plan_to_json",
    "request_from_engine_config",
]

# The bench hosts (bench/README.md, 2026-11-26): HBM copy 3.0 / 4.3 TB/s, pinned H2D/D2H 55 GB/s,
# CPU decode attention 35 GB/s bf16. TFLOP/s: the dense bf16 matmul `doctor --calibrate` measures,
# 736-800 on twenty H200 hosts (2026-11-27); H100 SXM has the same tensor cores (not measured).
# stream_gbs: the engine's stream path over 2 MiB blocks on the H200 host (38-42 GB/s, docs/performance-history.md).
_BENCH_HOST = Bandwidths(
    h2d_gbs=55.0, d2h_gbs=55.0, cpu_attn_gbs=35.0, disk_read_gbs=3.0, gpu_tflops=760.0, stream_gbs=40.0
)
KNOWN_GPU_BANDWIDTHS: dict[str, Bandwidths] = {
    "h100": replace(
        _BENCH_HOST,
        hbm_gbs=3000.0,
        gpu_name="H100",
        source="H100 bench-host figures (bench/README.md, 2026-11-26)",
    ),
    "h200": replace(
        _BENCH_HOST,
        hbm_gbs=4300.0,
        gpu_name="H200",
        source="H200 bench-host figures (bench/README.md, 2026-11-26)",
    ),
    "rtx4090": replace(DEFAULT_BANDWIDTHS, gpu_name="RTX 4090", source="RTX 4090 class defaults (assumed)"),
}


def known_gpu(name: str | None) -> str | None:
    """The KNOWN_GPU_BANDWIDTHS key a card named like `NVIDIA H100 80GB HBM3` matches, or None."""
    key = (name or "").lower().replace(" ", "").replace("-", "")
    return next((known for known in KNOWN_GPU_BANDWIDTHS if known in key), None)


def bandwidths_for_gpu(name: str | None) -> Bandwidths:
    """Figures for a card named like `NVIDIA H100 80GB HBM3`; the desktop defaults otherwise."""
    known = known_gpu(name)
    return KNOWN_GPU_BANDWIDTHS[known] if known is not None else DEFAULT_BANDWIDTHS


def make_plan(request: PlanRequest, bandwidths: Bandwidths) -> MemoryPlan:
    """The plan for `request`; when it does not fit, `advice` lists changes that would, with numbers."""
    plan = compute_plan(request, bandwidths)
    advice = advise(plan, bandwidths)
    return replace(plan, advice=advice, notes=notes_for(plan))


def request_from_engine_config(
    config: EngineConfig,
    spec: ModelSpec,
    vram_budget_bytes: int,
    ram_budget_bytes: int = 2 * GiB,
    disk_budget_bytes: int = 0,
    kv_dtype: str | None = None,
) -> PlanRequest:
    """The plan request the engine makes at start-up from its frozen config and the budgets."""
    return PlanRequest(
        spec=spec,
        vram_budget_bytes=vram_budget_bytes,
        context_len=config.max_model_len or spec.max_position_embeddings,
        rope_positions=config.max_model_len or spec.max_position_embeddings,  # the loader's table
        ram_budget_bytes=ram_budget_bytes,
        disk_budget_bytes=disk_budget_bytes,
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        block_size=config.block_size,
        kv_dtype=kv_dtype or config.kv_cache_dtype,  # bytes per token follow --kv-cache-dtype
        kv_skip_layers=len(config.kv_cache_dtype_skip_layers),
        weight_dtype=config.dtype,
        gpu_kv_budget_bytes=config.kv_cache_memory_bytes,
        enforce_eager=ChoiceFlags.of_config(config).enforce_eager,  # offload runs without graphs too
        cpu_offload_bytes=int(config.cpu_offload_gb * GiB),
        cold_attention=config.cold_attention,
        sparse_budget_tokens=config.sparse_budget_tokens,
        sparse_cache_seqs=config.sparse_cache_groups(),
        sink_blocks=config.num_sink_blocks,
        recent_window_tokens=config.hot_window_tokens,
        tensor_parallel_size=config.tensor_parallel_size,
        # the graph switches as the engine reads them (plan/choices.DeviceFacts.read)
        stream_graphs=cuda_graphs_on("STREAM"),
        sparse_graphs=cuda_graphs_on("SPARSE"),
        tp_graphs=cuda_graphs_on("TP"),
        mixed_graphs=cuda_graphs_on("MIXED"),
        rope_scaling=rope_type_of(config.rope_scaling),
        scale_pairs=scale_pairs_mode(),
    )


def describe_fit(plan: MemoryPlan) -> str:
    """One line: fits or not, with the context and where it goes."""
    verdict = "fits" if plan.fits else "does NOT fit"
    return (
        f"{plan.preset}: {format_tokens(plan.context_len)} tokens {verdict} "
        f"(gpu {format_tokens(plan.placed_gpu_tokens)}, cpu {format_tokens(plan.placed_cpu_tokens)}, "
        f"disk {format_tokens(plan.placed_disk_tokens)}; KV {format_bytes(plan.kv_bytes_per_token)}/token)"
    )
