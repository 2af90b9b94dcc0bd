"""The memory plan the engine prints before it loads anything (the same arithmetic as `kvspill plan`).

The plan is computed from the model's shapes (config.json, GGUF header or a benchmark shape),
the engine's frozen config and the card's size, with bandwidths from the saved calibration (or
the card's known figures, or documented defaults). On CUDA a plan that cannot hold one sequence
of `max_model_len` stops start-up with the planner's advice; on the CPU it is informational.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from kvspill.config import EngineConfig
from kvspill.errors import OutOfKVMemoryError
from kvspill.plan import (
    DEFAULT_BANDWIDTHS,
    Bandwidths,
    MemoryPlan,
    bandwidths_for_gpu,
    format_plan_table,
    make_plan,
    request_from_engine_config,
)
from kvspill.plan.spec import KNOWN_SHAPES, ModelSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartupPlan:
    plan: MemoryPlan
    bandwidths: Bandwidths
    table: str


def model_spec_for(model: str | None) -> ModelSpec:
    if model is not None and model.startswith("random:"):
        return KNOWN_SHAPES[model.removeprefix("random:")]
    return ModelSpec.from_model_arg(model)


def startup_plan(
    config: EngineConfig,
    device_total_bytes: int | None,
    gpu_name: str | None,
    calibration: Bandwidths | None = None,
) -> StartupPlan | None:
    """The plan for this engine, or None when the model's shapes cannot be read ahead of loading."""
    try:
        spec = model_spec_for(config.model)
    except Exception as e:  # the loader will report the real problem with its own message
        logger.debug("no plan before loading: %s", e)
        return None
    # As the engine sizes its pool (runner/memory.py): a --vram-budget is the ceiling itself;
    # --gpu-memory-utilization applies to the card only when there is no budget.
    if config.vram_budget_bytes is not None:
        vram, utilization = config.vram_budget_bytes, 1.0
    elif device_total_bytes is not None:
        vram, utilization = device_total_bytes, config.gpu_memory_utilization
    else:
        return None  # CPU device: no VRAM to plan; the KV pool is sized from RAM (runner/memory.py)
    request = replace(
        request_from_engine_config(
            config,
            spec,
            vram_budget_bytes=vram,
            ram_budget_bytes=config.cpu_kv_budget_bytes,
            disk_budget_bytes=config.disk_kv_budget_bytes,
        ),
        gpu_memory_utilization=utilization,
    )
    if calibration is not None:
        bandwidths = calibration.complete(bandwidths_for_gpu(calibration.gpu_name or gpu_name))
    else:
        bandwidths = bandwidths_for_gpu(gpu_name) if gpu_name else DEFAULT_BANDWIDTHS
    plan = make_plan(request, bandwidths)
    return StartupPlan(plan=plan, bandwidths=bandwidths, table=format_plan_table({"this engine": plan}))


def enforce(startup: StartupPlan, config: EngineConfig, on_gpu: bool) -> None:
    """Stop start-up when a CUDA plan cannot hold one sequence of the context, with advice.

    A user who fixed the KV size (`num_kv_blocks`, `kv_cache_memory_bytes`) took control: then
    the plan only warns."""
    if not on_gpu or startup.plan.fits:
        return
    if config.num_kv_blocks is not None or config.kv_cache_memory_bytes is not None:
        logger.warning("the memory plan does not fit, going on with the KV size you set:\n%s", startup.table)
        return
    raise OutOfKVMemoryError(
        "The memory plan does not fit:\n"
        + startup.table
        + "\nChange one of the options above (the advice lines), or lower --max-model-len."
    )
