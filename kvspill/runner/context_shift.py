"""The runner's half of a context shift (`scheduler/context_shift.py`, `types.ContextShift`): its
copy of the request's tokens and block table, and the kept keys turned on the pool's device.

Invariants:
- applied before the step's `cached_reqs` (their new blocks go after the shifted table) and its
  keys turn before the step's forward, in stream order: no step reads a kept key unturned;
- a shift of a request the runner does not hold (finished or preempted since) is dropped whole,
  keys included: its blocks may already be another request's;
- only the kept tokens' slots turn (the first `num_kv_tokens` of the new context after the
  sinks); the slots past them hold no key yet.
"""

from __future__ import annotations

import numpy as np
import torch

from kvspill.kernels.rope_shift import shift_cos_sin, shift_keys
from kvspill.model.layers import RotaryEmbedding
from kvspill.runner.inputs import RunnerRequestState
from kvspill.storage.storage import KVStorage
from kvspill.types import TIER_GPU, ContextShift


def rope_table(model: object) -> torch.Tensor | None:
    """The model's RoPE table (cos_sin_cache [max_positions, head_dim] fp32); None without one."""
    modules = model.modules() if isinstance(model, torch.nn.Module) else ()
    return next((m.cos_sin_cache for m in modules if isinstance(m, RotaryEmbedding)), None)


def apply_context_shift(st: RunnerRequestState, shift: ContextShift) -> None:
    """The request's tokens lose the dropped part; its table is the scheduler's after the shift."""
    start, stop = shift.num_sink_tokens, shift.num_sink_tokens + shift.num_dropped_tokens
    st.token_ids = st.token_ids[:start] + st.token_ids[stop:]  # a new list: see async_output.py
    st.block_ids = list(shift.block_ids)
    st.block_tiers = [TIER_GPU] * len(st.block_ids)
    st.num_cold_blocks = 0
    st.num_computed_tokens = min(st.num_computed_tokens, shift.num_kv_tokens)


def shift_slots(shift: ContextShift, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) slots [n] int64 of the kept keys that turn."""
    first = shift.num_sink_tokens // block_size
    src, dst = [], []
    for j, (src_block, dst_block) in enumerate(shift.rotations):
        start = (first + j) * block_size
        n = min(block_size, shift.num_kv_tokens - start)
        if n <= 0:
            break
        offsets = np.arange(n, dtype=np.int64)
        src.append(src_block * block_size + offsets)
        dst.append(dst_block * block_size + offsets)
    if not src:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(src), np.concatenate(dst)


class KeyShifter:
    """Turns the kept keys of a step's context shifts, layer by layer (`kernels/rope_shift.py`)."""

    def __init__(self, storage: KVStorage, cos_sin_cache: torch.Tensor | None) -> None:
        self.storage = storage
        self.cos_sin_cache = cos_sin_cache

    def run(self, shifts: list[ContextShift]) -> None:
        if self.cos_sin_cache is None:
            raise RuntimeError("a context shift reached a runner whose model has no RoPE table")
        layout, device = self.storage.layout, self.storage.device
        for shift in shifts:
            src, dst = shift_slots(shift, layout.block_size)
            if src.size == 0:
                continue
            cos, sin = shift_cos_sin(self.cos_sin_cache, shift.num_dropped_tokens)
            cos_sin = (cos.to(device), sin.to(device))
            src_t = torch.from_numpy(src).to(device)
            dst_t = torch.from_numpy(dst).to(device)
            for layer in range(layout.num_layers):
                shift_keys(self.storage.layer(layer), src_t, dst_t, cos_sin, self.storage.rotation(layer))
