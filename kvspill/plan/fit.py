"""Fit by default: the tiers and the context a mode (kvspill/modes.py) gives an engine on this host.

Start-up (plan/startup.py) and `kvspill plan` (plan/flag_plans.py) both call these, so the plan
shows what `serve --mode X` allocates:
- `fit_tiers`: an automatic cpu tier (no `--cpu-kv-budget`) and disk tier (no `--disk-kv-budget`).
  In default mode the cpu tier is what one sequence of the context needs past the GPU pool, at most
  `--cpu-kv-ram-share` of the available RAM (the RAM the host can give now, not its total); the
  filling modes take their whole share. A disk tier takes what RAM cannot hold, within the mode's
  share of the free disk. Sizes are whole blocks; a tier the user sized is left alone.
- `mode_context`: the context of extended and extreme (the longest the tiers hold, up to 4x and 8x
  the trained one), and `mode_rope_scaling`: the RoPE scaling that reaches it.

Invariants: pure (no torch, no I/O: the caller reads the RAM and the disk); placement does not
depend on bandwidths, so these plan with the defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kvspill.modes import Mode
from kvspill.plan.arithmetic import MemoryPlan, PlanRequest, compute_plan
from kvspill.plan.bandwidths import DEFAULT_BANDWIDTHS
from kvspill.plan.spec import ModelSpec
from kvspill.plan.units import format_bytes, format_tokens

# What an automatic tier grows by beyond the blocks the plan said were short: the measured plan
# after loading may give the GPU pool a few blocks less than the estimate before it, and sparse key
# summaries of the new cold blocks take GPU room too.
_GROW_MARGIN = 1.02
# extended/extreme stop short of the longest context that fits: the pools measured after loading
# come out a little smaller than the estimate the context was chosen from.
_LONGEST_MARGIN = 0.95
_CONTEXT_STEP = 1024  # extreme's context, a multiple of this


@dataclass(frozen=True)
class HostRoom:
    """What the host can give the tiers now (bytes; None: not known)."""

    ram_available_bytes: int | None = None
    disk_free_bytes: int | None = None


@dataclass(frozen=True)
class AutoTiers:
    """Which tiers the mode sizes (the user gave no size for them) and the RAM share it may take."""

    cpu: bool
    disk: bool
    ram_share: float | None = None  # --cpu-kv-ram-share; None: the mode's


def _blocks_bytes(tokens: int, request: PlanRequest, block_bytes: int) -> int:
    return -(-max(0, tokens) // request.block_size) * block_bytes


def fit_tiers(request: PlanRequest, mode: Mode, room: HostRoom, auto: AutoTiers) -> PlanRequest:
    """`request` with the tiers `auto` names sized by `mode` for its context on this host. A filling
    mode whose full share crowds the GPU out (the sparse key summaries of every cold block live
    there) falls back to what the context needs."""
    if not (auto.cpu or auto.disk):
        return request
    fitted = _grow_tiers(request, mode, room, auto)
    if (mode.cpu_fill or mode.disk_fill_share) and not compute_plan(fitted, DEFAULT_BANDWIDTHS).fits:
        needed = _grow_tiers(request, replace(mode, cpu_fill=False, disk_fill_share=0.0), room, auto)
        if compute_plan(needed, DEFAULT_BANDWIDTHS).fits:
            return needed
    return fitted


def _grow_tiers(request: PlanRequest, mode: Mode, room: HostRoom, auto: AutoTiers) -> PlanRequest:
    """The mode's starting sizes, grown (RAM first, then disk, each within its share) until one
    sequence of the context has a place."""
    ram_cap = disk_cap = disk_floor = 0
    if auto.cpu and room.ram_available_bytes is not None:
        ram_cap = int(room.ram_available_bytes * (auto.ram_share or mode.cpu_ram_share))
    if auto.disk and room.disk_free_bytes is not None:
        disk_cap = int(room.disk_free_bytes * mode.disk_free_share)
        disk_floor = min(disk_cap, int(room.disk_free_bytes * mode.disk_fill_share))
    ram = (ram_cap if mode.cpu_fill else 0) if auto.cpu else request.ram_budget_bytes
    disk = disk_floor if auto.disk else request.disk_budget_bytes
    for _ in range(8):  # the GPU pool can shrink as the cold tiers grow (sparse summaries): re-check
        plan = compute_plan(
            replace(request, ram_budget_bytes=ram, disk_budget_bytes=disk), DEFAULT_BANDWIDTHS
        )
        short = _blocks_bytes(plan.unplaced_tokens, request, plan.block_bytes)
        if plan.fits or not short:
            break
        if auto.cpu and ram < ram_cap:
            grow = min(ram_cap - ram, int(short * _GROW_MARGIN) + plan.block_bytes)
            ram, short = ram + grow, short - grow
        if auto.disk and short > 0 and disk < disk_cap:
            disk += min(disk_cap - disk, int(short * _GROW_MARGIN) + plan.block_bytes)
        elif not (auto.cpu and ram < ram_cap):
            break
    return replace(request, ram_budget_bytes=ram, disk_budget_bytes=disk)


def longest_context(request: PlanRequest, mode: Mode, room: HostRoom, auto: AutoTiers, floor: int) -> int:
    """The longest context up to `request.context_len` that fits with the tiers `mode` sizes (whole
    steps of _CONTEXT_STEP, a margin short of the longest), never under `floor` (the trained
    context: when even that does not fit, the plan says so with its advice)."""

    def fits(context: int) -> bool:
        at = replace(request, context_len=context, rope_positions=context)
        return compute_plan(fit_tiers(at, mode, room, auto), DEFAULT_BANDWIDTHS).fits

    if fits(request.context_len):
        return request.context_len
    low, high = -(-floor // _CONTEXT_STEP), request.context_len // _CONTEXT_STEP  # in steps
    if not fits(low * _CONTEXT_STEP):
        return floor
    while low < high:  # the largest step count that fits
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid * _CONTEXT_STEP) else (low, mid - 1)
    return max(floor, int(low * _LONGEST_MARGIN) * _CONTEXT_STEP)


def mode_context(
    mode: Mode, spec: ModelSpec, given: int | None, holds: Callable[[int], int]
) -> tuple[int, dict[str, Any] | None]:
    """(context, RoPE scaling) of an extending mode (`mode.context_factor` > 1) whose user gave no
    --rope-scaling: `given` (--max-model-len), else `context_factor` times the trained context,
    or for a `longest` mode `holds(that)`: the longest context up to it the tiers hold."""
    context = given
    if context is None:
        context = spec.max_position_embeddings * mode.context_factor
        if mode.longest:
            context = holds(context)
    return context, mode_rope_scaling(spec, context)


# The RoPE types a mode extends by raising their factor over the same original length.
_RAISED_TYPES = ("yarn", "llama3", "linear")


def mode_rope_scaling(spec: ModelSpec, context: int) -> dict[str, Any] | None:
    """The `--rope-scaling` that takes `spec`'s RoPE from its trained context to `context`: yarn
    over a plain RoPE; the model's own llama3, yarn or linear scaling with its factor raised by the
    same ratio. None where `context` is within the trained one. Raises ValueError for a RoPE this
    cannot extend (dynamic, longrope, a GGUF's per-frequency factors): its message says so."""
    trained = spec.max_position_embeddings
    if context <= trained:
        return None
    ratio = context / trained
    own = dict(spec.rope_scaling)
    rope_type = own.pop("rope_type", "default")
    if rope_type == "default":
        scaled = {"rope_type": "yarn", "factor": ratio, "original_max_position_embeddings": trained}
        return scaled | {"max_position_embeddings": context}
    if rope_type in _RAISED_TYPES:
        scaled = {"rope_type": rope_type, **own, "factor": float(own.get("factor", 1.0)) * ratio}
        return scaled | {"max_position_embeddings": context}
    raise ValueError(
        f"the model's RoPE ({rope_type}) is not one a mode extends (plain, yarn, llama3, linear): "
        f"give --rope-scaling and --max-model-len yourself, or use --mode default"
    )


def fit_line(plan: MemoryPlan) -> str:
    """One line on what the tiers hold of the context and how fast it decodes, with the flag that
    keeps it all on the GPU where it spills (a shorter --max-model-len; int8 KV where that does)."""
    r, tokens = plan.request, format_tokens
    head = f"{tokens(plan.context_len)} context" + (f" ({r.rope_scaling} RoPE)" if r.rope_scaling else "")
    if not plan.fits:
        return f"{head}: does not fit ({tokens(plan.max_context)} tokens at most in the tiers)"
    spilled = plan.placed_cpu_tokens + plan.placed_disk_tokens
    speed = f"decode about {plan.decode_tok_s:.3g} tok/s at the full context"
    if not spilled:
        return (
            f"{head}: all of it on the {_gpu_word(r)} ({tokens(plan.gpu_kv_tokens)} tokens of room); {speed}"
        )
    parts = [f"{tokens(plan.placed_gpu_tokens)} tokens on the {_gpu_word(r)}"]
    if plan.placed_cpu_tokens:
        parts.append(f"{tokens(plan.placed_cpu_tokens)} in {format_bytes(plan.cpu_kv_bytes)} of RAM")
    if plan.placed_disk_tokens:
        parts.append(f"{tokens(plan.placed_disk_tokens)} in {format_bytes(plan.disk_kv_bytes)} of disk")
    keep = [f"--max-model-len {tokens(plan.gpu_kv_tokens // 1024 * 1024)} keeps it all on the {_gpu_word(r)}"]
    if r.kv_dtype == "auto":
        int8 = compute_plan(
            replace(r, kv_dtype="int8", ram_budget_bytes=0, disk_budget_bytes=0), plan.bandwidths
        )
        if int8.fits and not int8.placed_cpu_tokens + int8.placed_disk_tokens:
            keep.append("--kv-cache-dtype int8 would too (about half the bytes; not exact)")
    return f"{head}: {', '.join(parts)}; {speed}; {'; '.join(keep)}"


def _gpu_word(request: PlanRequest) -> str:
    return "GPU" if request.device == "cuda" else "device pool"
