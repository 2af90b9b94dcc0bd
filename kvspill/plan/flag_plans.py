"""The plans of a model under the engine flags given: every mode and `yours`, what
`kvspill plan` prints and the manager's `/api/plan` answers.

`plans_for_flags` takes the flags as EngineConfig keyword arguments (`options.engine_kwargs` of
the command line's or a profile's `EngineOptions`), so the planner never sees the flag set.
Columns: one per mode (`default`, `extended`, `extreme`: what `serve --mode X` runs with the
engine flags given) and `yours` (every flag given, --mode and the memory knobs included: what
`serve` with these flags allocates). The memory knobs only set `yours`; `PLANNED_FIELDS` are the EngineConfig fields the plan models
(the command line names the others as "not planned").

Invariants:
- Never imports torch and never needs a GPU or model weights: shapes come from a config.json, a
  GGUF header or a known shape name; bandwidths from the saved calibration, a known card
  (`gpu`) or documented defaults.
- Available RAM and free disk (for the automatic tiers) are read here, and passed to the pure
  planner (plan/fit.py), as start-up reads them.
- Raises KvspillError on bad input (one line that says what to change).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kvspill.config import EngineConfig, block_size_of, rope_type_of, sparse_cache_groups, with_attention_mode
from kvspill.env import scale_pairs_mode
from kvspill.errors import InvalidParameterError
from kvspill.modes import MODES
from kvspill.plan import (
    DEFAULT_BANDWIDTHS,
    KNOWN_GPU_BANDWIDTHS,
    Bandwidths,
    MemoryPlan,
    PlanRequest,
    bandwidths_for_gpu,
    known_gpu,
    make_plan,
    plan_to_json,
)
from kvspill.plan.calibrate import load_calibration
from kvspill.plan.fit import AutoTiers, HostRoom, fit_tiers, longest_context, mode_context
from kvspill.plan.host_rates import cpu_engine_request, cpu_host_bandwidths, host_has_cuda_gpu
from kvspill.plan.spec import ModelSpec, random_weight_format
from kvspill.plan.startup import host_pool_bytes
from kvspill.plan.units import GiB, format_bytes, parse_bytes, parse_tokens

ASSUMED_VRAM_BYTES = 24 * GiB  # no flag and no calibrated card: plan for the W3 class (24 GB)


def planning_bandwidths(gpu: str | None, vram_given: bool = False) -> tuple[Bandwidths, Bandwidths | None]:
    """(rates to plan with, the saved calibration if any). `--gpu NAME` wins over the calibration.
    On a host with no CUDA GPU and no calibrated card, unless a card's budget was given
    (`vram_given`: --vram-budget), the CPU's rates: the plan is the engine on this CPU."""
    calibration = load_calibration()
    if gpu is None and not vram_given and (calibration is None or not calibration.gpu_name):
        if not host_has_cuda_gpu():
            return cpu_host_bandwidths(calibration), calibration
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


def read_host_room(kv_disk_dir: str | None = None) -> HostRoom:
    """What the host can give the tiers now: the available RAM, and the free disk where the disk
    tier would live (`--kv-disk-dir`, else the temp dir); None where unknown. The engine sizes its
    automatic tiers from the same reading (engine/setup.py)."""
    import shutil
    import tempfile

    where = Path(kv_disk_dir) if kv_disk_dir else Path(tempfile.gettempdir())
    while not where.exists() and where != where.parent:  # the tier creates its directory
        where = where.parent
    try:
        disk: int | None = shutil.disk_usage(where).free
    except OSError:
        disk = None
    try:
        import psutil

        ram: int | None = int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        ram = None
    return HostRoom(ram, disk)


def _resolve_vram(
    vram_budget_bytes: int | None, calibration: Bandwidths | None, bandwidths: Bandwidths | None = None
) -> tuple[int, list[str]]:
    """(VRAM budget in bytes, header lines saying where it came from when not from the flag); on
    the CPU (`bandwidths.device`) the available RAM, the "gpu" tier's home."""
    if vram_budget_bytes is not None:
        return vram_budget_bytes, []
    if bandwidths is not None and bandwidths.device == "cpu":
        ram = read_host_room().ram_available_bytes or ASSUMED_VRAM_BYTES
        return ram, [
            f"no CUDA GPU: the engine runs on the CPU ({bandwidths.cpu_dtype}), its KV pool in host RAM "
            f"({format_bytes(ram)} available); rates: {bandwidths.source}"
        ]
    if calibration is not None and calibration.gpu_total_bytes:
        vram = calibration.gpu_total_bytes
        return vram, [f"VRAM budget: {format_bytes(vram)} (the calibrated {calibration.gpu_name})"]
    vram = ASSUMED_VRAM_BYTES
    return vram, [f"VRAM budget: {format_bytes(vram)} assumed (no --vram-budget, no calibrated GPU)"]


# EngineConfig field -> PlanRequest field: engine flags that every column takes, and memory
# knobs that only `yours` takes (the modes size their own).
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
    "mode",
    "cpu_kv_ram_share",
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
    if context is not None:
        if "max_model_len" in given:
            raise InvalidParameterError("context", "--context is --max-model-len: give one of them")
        given["max_model_len"] = parse_tokens(context, "--context")
    return given


def _base_request(
    model: str | None, spec: ModelSpec, vram: int, flags: dict[str, Any], context: str | None, kv_dtype: str
) -> PlanRequest:
    """What every column shares: the model, the VRAM budget, the context and the engine flags."""
    return PlanRequest(
        spec=spec,
        vram_budget_bytes=vram,
        context_len=parse_tokens(context, "--context")
        if context is not None
        else flags.get("max_model_len", spec.max_position_embeddings),
        ram_budget_bytes=0,  # the engine's cpu tier: --cpu-kv-budget (a memory knob) or the mode's
        # as the engine: --vram-budget is the ceiling itself, else a share of the card (choices.vram_budget)
        gpu_memory_utilization=1.0 if "vram_budget_bytes" in flags else EngineConfig.gpu_memory_utilization,
        max_num_seqs=flags.get("max_num_seqs", EngineConfig.max_num_seqs),
        max_num_batched_tokens=flags.get("max_num_batched_tokens", EngineConfig.max_num_batched_tokens),
        block_size=block_size_of(flags),
        # --kv-dtype (this command's own) or the engine's --kv-cache-dtype: the same choice
        kv_dtype=kv_dtype if kv_dtype != "auto" else flags.get("kv_cache_dtype", "auto"),
        kv_skip_layers=len(flags.get("kv_cache_dtype_skip_layers", ())),
        weight_dtype=flags.get("dtype", "auto"),
        # Unset: a random shape's type (dense without one), else the file's own format as the
        # engine holds it on CUDA (a GGUF stays quantized).
        quantization=flags.get("quantization") or random_weight_format(model) or "gguf",
        # the engine's block cache of sparse attention
        sparse_cache_seqs=sparse_cache_groups(
            flags.get("cold_attention", EngineConfig.cold_attention),
            flags.get("max_num_seqs", EngineConfig.max_num_seqs),
            flags.get("sparse_cache_seqs", EngineConfig.sparse_cache_seqs),
        ),
        gpu_kv_blocks=flags.get("num_kv_blocks"),
        rope_scaling=rope_type_of(flags.get("rope_scaling")),
        scale_pairs=scale_pairs_mode(),
        # the engine's own defaults where a flag is left out (PlanRequest's suit other callers)
        **{plan: flags.get(name, getattr(EngineConfig, name)) for name, plan in _ENGINE_KNOBS.items()},
    )


def _mode_request(
    base: PlanRequest, name: str, spec: ModelSpec, room: HostRoom, flags: dict[str, Any], memory: bool
) -> PlanRequest:
    """`base` as `serve --mode name` runs it with `flags` (EngineConfig fields; the memory knobs
    only where `memory`): extreme's sparse cold attention where --cold-attention is auto, the
    mode's context and RoPE (plan/fit.py mode_context, unless --rope-scaling was given), then its
    automatic tiers, as start-up sizes them (plan/startup.py)."""
    mode = MODES[name]
    knobs = {_MEMORY_KNOBS[k]: v for k, v in flags.items() if memory and k in _MEMORY_KNOBS}
    if "vram_budget_bytes" in flags:  # the engine takes all of a --vram-budget (choices.vram_budget)
        knobs.pop("gpu_memory_utilization", None)
    request = replace(base, preset=name, **knobs)
    if request.cold_attention == "auto" and flags.get("attention", "auto") == "auto":
        cold = mode.auto_cold_attention
        seqs = flags.get("sparse_cache_seqs", EngineConfig.sparse_cache_seqs)
        request = replace(
            request,
            cold_attention=cold,
            block_size=block_size_of({**flags, "cold_attention": cold}),
            sparse_cache_seqs=sparse_cache_groups(cold, request.max_num_seqs, seqs),
        )
    auto = AutoTiers(
        cpu=(not memory or "cpu_kv_budget_bytes" not in flags) and request.device == "cuda",
        disk=not memory or "disk_kv_budget_bytes" not in flags,
        ram_share=flags.get("cpu_kv_ram_share") if memory else None,
    )
    if mode.context_factor > 1 and base.rope_scaling is None:  # the mode's context and RoPE

        def holds(context: int) -> int:
            at = replace(request, context_len=context, rope_positions=context)
            return longest_context(at, mode, room, auto, spec.max_position_embeddings)

        try:
            context, rope = mode_context(mode, spec, flags.get("max_model_len"), holds)
        except ValueError as e:
            raise InvalidParameterError("mode", f"--mode {name}: {e}") from e
        request = replace(
            request, context_len=context, rope_positions=context, rope_scaling=rope_type_of(rope)
        )
    fixed_pool = memory and "kv_cache_memory_bytes" in flags
    if request.device == "cpu" and not fixed_pool and room.ram_available_bytes is not None:
        # the engine on the CPU: its pool in RAM, sized for this context as start-up sizes it
        request = replace(request, gpu_kv_budget_bytes=host_pool_bytes(request, room.ram_available_bytes))
    return fit_tiers(request, mode, room, auto)


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
    bandwidths, calibration = planning_bandwidths(gpu, "vram_budget_bytes" in flags)
    vram, header = _resolve_vram(flags.get("vram_budget_bytes"), calibration, bandwidths)
    ranks = flags.get("tensor_parallel_size", 1)
    if ranks > 1:  # every figure below is one rank's: its GPU, its shard, its heads' KV
        spec = spec.per_rank(ranks)
        header.append(
            f"per rank of --tensor-parallel-size {ranks}: each GPU holds 1/{ranks} of the weights and of "
            "every token's KV (its KV heads); the budgets are per GPU, the token counts the model's; "
            "all-reduce time is not modeled"
        )
    base = _base_request(model, spec, vram, flags, context, kv_dtype)
    if bandwidths.device == "cpu":  # the engine on this CPU (plan/host_rates.py)
        base = cpu_engine_request(base, bandwidths, vram)
    room = read_host_room(flags.get("kv_disk_dir"))
    plans = {
        name: make_plan(_mode_request(base, name, spec, room, flags, False), bandwidths) for name in MODES
    }
    mine = _mode_request(base, flags.get("mode", "default"), spec, room, flags, True)
    plans["yours"] = make_plan(replace(mine, preset="yours"), bandwidths)
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
