"""The modes (`--mode default|extended|extreme`): how much context an engine runs, and where it
keeps the KV that does not fit the GPU.

A mode is a default for the flags that decide the context and the tiers; a flag given always
wins. What each mode sets:

- default: the model's trained context (after `--rope-scaling`), all exact. A cpu tier only for
  what the GPU share of the budget cannot hold, at most half the available RAM; no disk tier.
- extended: up to 4x the trained context, as much of it as the GPU and RAM hold, the RoPE
  extended to it (yarn on a plain RoPE; the model's own llama3, yarn or linear scaling raised by
  the same factor); exact; a cpu tier of half the available RAM; no disk tier (exact attention
  over KV read from disk runs at a fraction of a token a second).
- extreme: the longest context the host holds, up to 8x the trained one (the RoPE extended the
  same way); `--cold-attention auto` means sparse; a cpu tier of 80% of the available RAM; a disk
  tier of a quarter of the free disk (up to 90% when the context needs it).

The sizes that depend on the host are resolved at start-up and by `kvspill plan` through the same
function (`plan/fit.py`); `--print-config` and `kvspill plan` show them. Pure data: no imports
beyond the standard library, so config.py can check a mode's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    """What a mode sets where the user gave no flag (see the module docstring)."""

    name: str
    context_factor: int  # the context is this many times the trained one (1: the trained one)
    longest: bool  # True: the longest context the tiers hold, up to `context_factor` times
    auto_cold_attention: str  # what --cold-attention auto runs in this mode
    cpu_ram_share: float  # an automatic cpu tier takes at most this share of the available RAM
    cpu_fill: bool  # True: all of that share; False: what the context needs past the GPU
    disk_free_share: float  # an automatic disk tier takes at most this share of the free disk
    disk_fill_share: float  # ... and at least this share (0: what the context needs past RAM)
    description: str


MODES: dict[str, Mode] = {
    "default": Mode(
        "default", 1, False, "auto", 0.5, False, 0.0, 0.0,
        "the trained context, exact; cpu tier only for what the GPU cannot hold (<= 1/2 of available RAM)",
    ),
    "extended": Mode(
        "extended", 4, True, "auto", 0.5, True, 0.0, 0.0,
        "up to 4x the trained context (RoPE extended) as GPU and RAM hold, exact; cpu tier 1/2 of "
        "available RAM; no disk",
    ),
    "extreme": Mode(
        "extreme", 8, True, "sparse", 0.8, True, 0.9, 0.25,
        "the longest context the host holds (<= 8x, RoPE extended), sparse cold attention; "
        "cpu tier 80% of available RAM; disk tier 1/4 of the free disk",
    ),
}  # fmt: skip

MODE_NAMES = tuple(MODES)
