"""The memory plan: what fits where, and how fast it will run, before anything is loaded.

The public face of the planner, shared by `kvspill plan` and engine start-up: `make_plan` (the
arithmetic of `plan/arithmetic.py` plus advice from `plan/report.py`), the named presets
(`default`, `extended`, `extreme`) sized for a context on this host, and figures for known cards.

Invariants:
- No torch, no I/O: the caller passes bandwidths, host RAM and free disk in.
- `make_plan` never raises for a plan that does not fit: `fits=False` and `advice` say what to
  change, each line with a flag and a number that the same arithmetic checked.
- A preset changes only memory knobs (VRAM fraction, CPU and disk tiers); engine flags stay the user's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvspill.config import EngineConfig, rope_type_of
from kvspill.env import cuda_graphs_on
from kvspill.errors import InvalidParameterError
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
    "PRESETS",
    "RATE_FIELDS",
    "Bandwidths",
    "DecodeFloor",
    "MemoryPlan",
    "PlanRequest",
    "Preset",
    "bandwidths_for_gpu",
    "known_gpu",
    "compute_plan",
    "describe_fit",
    "format_plan_table",
    "make_plan",
    "parse_bytes",
    "plan_presets",
    "plan_to_json",
    "preset_request",
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


def _round_up(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size) * block_size


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
        rope_scaling=rope_type_of(config.rope_scaling),
    )


# -- presets ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """Memory knobs of a named preset; the engine flags (chunk, seqs, dtypes) stay the user's."""

    name: str
    gpu_memory_utilization: float
    cpu_min_bytes: int  # the CPU tier is at least this (when the host has it)
    cpu_host_fraction: float  # ... and at most this fraction of host RAM
    cpu_fill: bool  # True: as large as the cap allows; False: what the context needs
    disk_free_fraction: float  # disk tier: at most this fraction of the free disk (0: none)
    disk_fill_fraction: float  # ... and at least this fraction of it (0: what the context needs)
    description: str


PRESETS: dict[str, Preset] = {
    "default": Preset(
        "default",
        0.75,
        2 * GiB,
        0.5,
        False,
        0.0,
        0.0,
        "75% of the VRAM budget; CPU tier 2 GiB or what the context needs",
    ),
    "extended": Preset(
        "extended",
        0.90,
        2 * GiB,
        0.5,
        True,
        0.5,
        0.0,
        "90% of VRAM; CPU tier half the host RAM; disk only for what RAM cannot hold",
    ),
    "extreme": Preset(
        "extreme",
        0.95,
        2 * GiB,
        0.8,
        True,
        0.9,
        0.25,
        "95% of VRAM; CPU tier 80% of host RAM; disk tier a quarter of the free disk",
    ),
}


def preset_request(
    name: str, request: PlanRequest, host_ram_bytes: int | None = None, disk_free_bytes: int | None = None
) -> PlanRequest:
    """`request` with the memory knobs of preset `name`, sized for its context on this host."""
    if name not in PRESETS:
        raise InvalidParameterError("preset", f"preset must be one of {', '.join(PRESETS)}, got {name!r}")
    preset = PRESETS[name]
    base = replace(
        request,
        gpu_memory_utilization=preset.gpu_memory_utilization,
        ram_budget_bytes=0,
        disk_budget_bytes=0,
        preset=name,
    )
    probe = compute_plan(base, DEFAULT_BANDWIDTHS)
    cold_bytes = max(0, _round_up(request.context_len, request.block_size) - probe.gpu_kv_tokens)
    cold_bytes *= probe.kv_bytes_per_token
    cpu_cap = None if host_ram_bytes is None else int(host_ram_bytes * preset.cpu_host_fraction)
    cpu = max(preset.cpu_min_bytes, cold_bytes)
    if preset.cpu_fill and cpu_cap is not None:
        cpu = max(cpu, cpu_cap)
    if cpu_cap is not None:
        cpu = min(cpu, cpu_cap)
    disk = 0
    if preset.disk_free_fraction > 0:
        disk = max(0, cold_bytes - cpu)
        if disk_free_bytes is not None:
            disk = max(disk, int(disk_free_bytes * preset.disk_fill_fraction))
            disk = min(disk, int(disk_free_bytes * preset.disk_free_fraction))
    return replace(base, ram_budget_bytes=cpu, disk_budget_bytes=disk)


def plan_presets(
    request: PlanRequest,
    bandwidths: Bandwidths,
    host_ram_bytes: int | None = None,
    disk_free_bytes: int | None = None,
    user: PlanRequest | None = None,
) -> dict[str, MemoryPlan]:
    """Plans for `default`, `extended`, `extreme` (built from `request`), then the user's own flags.

    `user` defaults to `request` as given; its plan is under the key `yours`.
    """
    plans = {
        name: make_plan(preset_request(name, request, host_ram_bytes, disk_free_bytes), bandwidths)
        for name in PRESETS
    }
    plans["yours"] = make_plan(replace(user or request, preset="yours"), bandwidths)
    return plans


def describe_fit(plan: MemoryPlan) -> str:
    """One line: fits or not, with the context and where it goes."""
    verdict = "fits" if plan.fits else "does NOT fit"
    return (
        f"{plan.preset}: {format_tokens(plan.context_len)} tokens {verdict} "
        f"(gpu {format_tokens(plan.placed_gpu_tokens)}, cpu {format_tokens(plan.placed_cpu_tokens)}, "
        f"disk {format_tokens(plan.placed_disk_tokens)}; KV {format_bytes(plan.kv_bytes_per_token)}/token)"
    )
