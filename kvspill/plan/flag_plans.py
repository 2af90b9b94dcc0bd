"""The plans of a model under the engine flags given: every preset and `yours`, what
`kvspill plan` prints and the manager's `/api/plan` answers.

`plans_for_flags` takes the flags as EngineConfig keyword arguments (`options.engine_kwargs` of
the command line's or a profile's `EngineOptions`), so the planner never sees the flag set.
Columns: one per preset (`default`, `extended`, `extreme`) and `yours` (the default preset with
every flag given applied). Engine flags that shape a plan set every column, except the memory
knobs, which only set `yours`; `PLANNED_FIELDS` are the EngineConfig fields the plan models
(the command line names the others as "not planned").

Invariants:
- Never imports torch and never needs a GPU or model weights: shapes come from a config.json, a
  GGUF header or a known shape name; bandwidths from the saved calibration, a known card
  (`gpu`) or documented defaults.
- Host RAM and free disk (for the presets) are read here, and passed to the pure planner.
- Raises KvspillError on bad input (one line that says what to change).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kvspill.config import EngineConfig, block_size_of, rope_type_of, sparse_cache_groups, with_attention_mode
from kvspill.errors import InvalidParameterError
from kvspill.plan import (
    DEFAULT_BANDWIDTHS,
    KNOWN_GPU_BANDWIDTHS,
    Bandwidths,
    MemoryPlan,
    PlanRequest,
    bandwidths_for_gpu,
    known_gpu,
    plan_presets,
    plan_to_json,
    preset_request,
)
from kvspill.plan.calibrate import load_calibration
from kvspill.plan.spec import ModelSpec
from kvspill.plan.units import GiB, format_bytes, parse_bytes, parse_tokens

ASSUMED_VRAM_BYTES = 24 * GiB  # no flag and no calibrated card: plan for the W3 class (24 GB)


def planning_bandwidths(gpu: str | None) -> tuple[Bandwidths, Bandwidths | None]:
    """(rates to plan with, the saved calibration if any). `--gpu NAME` wins over the calibration."""
    calibration = load_calibration()
    if gpu is not None:
        known = known_gpu(gpu)
        if known is None:
            raise InvalidParameterError(
                "gpu",
                f"--gpu {gpu!r} is not a card the planner knows: use one of "
                f"{', '.join(sorted(KNOWN_GPU_BANDWIDTHS))}, or leave it out and run "
                "`kvspill doctor --calibrate` on the machine to plan with its measured figures",
            )
        return bandwidths_for_gpu(gpu), calibration
    if calibration is None:
        return DEFAULT_BANDWIDTHS, None
    return calibration.complete(bandwidths_for_gpu(calibration.gpu_name)), calibration


def _host_sizes() -> tuple[int | None, int | None]:
    """(host RAM, free disk under the home directory) in bytes; None where unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().total), int(psutil.disk_usage(str(Path.home())).free)
    except (ImportError, OSError):
        return None, None


def _resolve_vram(vram_budget_bytes: int | None, calibration: Bandwidths | None) -> tuple[int, list[str]]:
    """(VRAM budget in bytes, header lines saying where it came from when not from the flag)."""
    if vram_budget_bytes is not None:
        return vram_budget_bytes, []
    if calibration is not None and calibration.gpu_total_bytes:
        vram = calibration.gpu_total_bytes
        return vram, [f"VRAM budget: {format_bytes(vram)} (the calibrated {calibration.gpu_name})"]
    vram = ASSUMED_VRAM_BYTES
    return vram, [f"VRAM budget: {format_bytes(vram)} assumed (no --vram-budget, no calibrated GPU)"]


# EngineConfig field -> PlanRequest field: engine flags that every column takes, and memory
# knobs that only `yours` takes (the presets set their own).
_ENGINE_KNOBS = {
    "enforce_eager": "enforce_eager",
    "cold_attention": "cold_attention",
    "sparse_budget_tokens": "sparse_budget_tokens",
    "num_sink_blocks": "sink_blocks",
    "hot_window_tokens": "recent_window_tokens",
}
_MEMORY_KNOBS = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "cpu_kv_budget_bytes": "ram_budget_bytes",
    "disk_kv_budget_bytes": "disk_budget_bytes",
    "kv_cache_memory_bytes": "gpu_kv_budget_bytes",
}
PLANNED_FIELDS = {
    *_ENGINE_KNOBS,
    *_MEMORY_KNOBS,
    "sparse_cache_seqs",
    "vram_budget_bytes",
    "max_model_len",
    "kv_cache_dtype",
    "kv_cache_dtype_skip_layers",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "dtype",
    "quantization",
    "tensor_parallel_size",
    "attention",  # cpu: planned as the engine runs it on a GPU (config.with_attention_mode)
    "num_kv_blocks",
    "rope_scaling",  # named in the notes past the model's positions
}


def _plan_flags(flags: dict[str, Any], ram_budget: str | None, context: str | None) -> dict[str, Any]:
    """The engine flags given, checked, by EngineConfig field; `--ram-budget` is the CPU tier
    (`cpu_kv_budget_bytes`) under plan's older name."""
    given = dict(flags)
    # The planner checks these two its own way: --dtype also takes bf16/fp16/fp32, and a VRAM
    # budget under the engine's 256 MiB floor is planned (and said not to fit), as before.
    # --quantization also takes what-if GGUF types (q4_k_m, q8_0, ...): PlanRequest checks it.
    skip = ("dtype", "vram_budget_bytes", "quantization")
    config = EngineConfig(**{k: v for k, v in given.items() if k not in skip})
    if config.attention == "cpu":  # the gpu tier only what the store kernels write, cold path cpu
        resolved = with_attention_mode(config, "cuda")
        given.update(
            cold_attention=resolved.cold_attention,
            hot_window_tokens=resolved.hot_window_tokens,
            num_kv_blocks=resolved.num_kv_blocks,
        )
    if ram_budget is not None:
        if "cpu_kv_budget_bytes" in given:
            raise InvalidParameterError("ram_budget", "--ram-budget is --cpu-kv-budget: give one of them")
        given["cpu_kv_budget_bytes"] = parse_bytes(ram_budget, "--ram-budget")
    if context is not None and "max_model_len" in given:
        raise InvalidParameterError("context", "--context is --max-model-len: give one of them")
    return given


def _base_request(
    spec: ModelSpec, vram: int, flags: dict[str, Any], context: str | None, kv_dtype: str
) -> PlanRequest:
    """What every column shares: the model, the VRAM budget, the context and the engine flags."""
    return PlanRequest(
        spec=spec,
        vram_budget_bytes=vram,
        context_len=parse_tokens(context, "--context")
        if context is not None
        else flags.get("max_model_len", spec.max_position_embeddings),
        max_num_seqs=flags.get("max_num_seqs", EngineConfig.max_num_seqs),
        max_num_batched_tokens=flags.get("max_num_batched_tokens", EngineConfig.max_num_batched_tokens),
        block_size=block_size_of(flags),
        # --kv-dtype (this command's own) or the engine's --kv-cache-dtype: the same choice
        kv_dtype=kv_dtype if kv_dtype != "auto" else flags.get("kv_cache_dtype", "auto"),
        kv_skip_layers=len(flags.get("kv_cache_dtype_skip_layers", ())),
        weight_dtype=flags.get("dtype", "auto"),
        # Unset: the file's own format, as the engine holds it on CUDA (a GGUF stays quantized).
        quantization=flags.get("quantization") or "gguf",
        # the engine's block cache of sparse attention
        sparse_cache_seqs=sparse_cache_groups(
            flags.get("cold_attention", EngineConfig.cold_attention),
            flags.get("max_num_seqs", EngineConfig.max_num_seqs),
            flags.get("sparse_cache_seqs", EngineConfig.sparse_cache_seqs),
        ),
        gpu_kv_blocks=flags.get("num_kv_blocks"),
        rope_scaling=rope_type_of(flags.get("rope_scaling")),
        **{_ENGINE_KNOBS[k]: v for k, v in flags.items() if k in _ENGINE_KNOBS},
    )


def plans_for_flags(
    model: str | None,
    flags: dict[str, Any],
    ram_budget: str | None = None,
    context: str | None = None,
    kv_dtype: str = "auto",
    gpu: str | None = None,
) -> tuple[dict[str, Any], dict[str, MemoryPlan], list[str]]:
    """(the `--json` payload, the plans by column, header lines) of `kvspill plan` for `flags`
    (EngineConfig keyword arguments); `ram_budget`, `context` and `kv_dtype` are plan's older
    names for --cpu-kv-budget, --max-model-len and --kv-cache-dtype, `gpu` a known card's figures."""
    spec = ModelSpec.from_model_arg(model)
    flags = _plan_flags(flags, ram_budget, context)
    bandwidths, calibration = planning_bandwidths(gpu)
    vram, header = _resolve_vram(flags.get("vram_budget_bytes"), calibration)
    ranks = flags.get("tensor_parallel_size", 1)
    if ranks > 1:  # every figure below is one rank's: its GPU, its shard, its heads' KV
        spec = spec.per_rank(ranks)
        header.append(
            f"per rank of --tensor-parallel-size {ranks}: each GPU holds 1/{ranks} of the weights and of "
            "every token's KV (its KV heads); the budgets are per GPU, the token counts the model's; "
            "all-reduce time is not modeled"
        )
    base = _base_request(spec, vram, flags, context, kv_dtype)
    host = _host_sizes()
    user = preset_request("default", base, *host)  # yours: the default preset, then the flags given
    user = replace(
        user, preset="yours", **{_MEMORY_KNOBS[k]: v for k, v in flags.items() if k in _MEMORY_KNOBS}
    )
    plans = plan_presets(base, bandwidths, *host, user=user)
    payload = {
        "model": spec.name,
        "context_len": base.context_len,
        "vram_budget_bytes": vram,
        "tensor_parallel_size": ranks,
        "bandwidths_source": bandwidths.source,
        "fits": plans["yours"].fits,
        "plans": {name: plan_to_json(p) for name, p in plans.items()},
    }
    return payload, plans, header
