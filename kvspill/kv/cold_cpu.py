"""Cold path (a): attend a step's CPU parts on the host, where the blocks lie (cpu pool or disk map).

`ColdCpuPath` is built once per step by `ColdStep` (kv/cold_attention.py) with the step's CPU
parts; per layer, `work` fills rows of a host (o, lse) pair: every part through the C++ kernel
in one call per tier (`kernels/cpu_attention.py`, reading blocks in place), or, without the
kernel, part by part with a gather of `cpu_chunk_blocks` blocks and torch's CPU flash kernel.
fp32 accumulators; rows of different parts are disjoint, so parts may run on several workers.

Invariant: the host waits for async copies into the cpu pool (`ensure_host_ready`) before its
first read of the pools in a step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from kvspill.kernels.cpu_attention import CpuParts, cpu_paged_attention
from kvspill.kernels.kv_quant import dequantize_kv
from kvspill.kernels.merge_states import merge_attention_states_ref
from kvspill.kv.cold_math import attend_unmasked_cpu
from kvspill.kv.cold_stream import ColdPart
from kvspill.kv.storage import TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK


def key_splits(num_blocks: int, num_kv_heads: int) -> int:
    """Key splits for the CPU kernel: enough (kv heads x splits) tasks for the threads, dividing the blocks."""
    want = max(1, -(-torch.get_num_threads() // num_kv_heads))
    return next(s for s in range(min(want, num_blocks), 0, -1) if num_blocks % s == 0)


class ColdCpuPath:
    """One step's CPU parts and how to attend them (see the module docstring)."""

    def __init__(
        self,
        storage: TieredKVStorage,
        parts: list[ColdPart],
        *,
        scale: float,
        has_kernel: bool,
        cpu_threads: int,
        chunk_blocks: int,
        ensure_host_ready: Callable[[], None],
        add_stats: Callable[[int, float], None],
    ) -> None:
        self.storage = storage
        self.parts = parts
        self.scale = scale
        self.has_kernel = has_kernel
        self.cpu_threads = cpu_threads
        self.chunk_blocks = chunk_blocks
        self.ensure_host_ready = ensure_host_ready
        self.add_stats = add_stats
        self._tier_parts: list[tuple[int, CpuParts]] | None = None

    def work_items(self) -> list[ColdPart | None]:
        """One kernel call covers every part (it spreads them over its threads); the fallback
        runs part by part."""
        return [None] if self.has_kernel else list(self.parts)

    def work(
        self,
        layer_idx: int,
        q_host: torch.Tensor,
        part: ColdPart | None,
        event: torch.cuda.Event | None,
        o: torch.Tensor,
        lse: torch.Tensor,
    ) -> None:
        """Attend on the CPU and write the rows of (o, lse): all parts with the kernel (part None),
        else `part` alone (rows of parts are disjoint)."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            if event is not None:
                event.synchronize()
            self.ensure_host_ready()
            if part is None:
                num_blocks = self._kernel_layer(layer_idx, q_host, o, lse)
            else:
                num_blocks = self._part_torch(layer_idx, q_host, part, o, lse)
        layout = self.storage.layout
        self.add_stats(num_blocks * layout.block_bytes // layout.num_layers, time.perf_counter() - t0)

    def _kernel_layer(self, layer_idx: int, q_host: torch.Tensor, o: torch.Tensor, lse: torch.Tensor) -> int:
        """Every CPU part through the C++ kernel, reading the blocks in place: one call per tier
        holding any of them; a second tier's partial merges by LSE into the rows it shares."""
        tiers = self.tier_parts()
        for i, (tier, parts) in enumerate(tiers):
            pool = self.storage.pool(tier)
            if i == 0:
                cpu_paged_attention(q_host, pool, layer_idx, parts, self.scale, (o, lse), self.cpu_threads)
                continue
            o_t, lse_t = torch.zeros_like(o), torch.full_like(lse, float("-inf"))
            cpu_paged_attention(q_host, pool, layer_idx, parts, self.scale, (o_t, lse_t), self.cpu_threads)
            merged_o, merged_lse = merge_attention_states_ref(o, lse, o_t, lse_t)
            o.copy_(merged_o)
            lse.copy_(merged_lse)
        return sum(len(parts.block_ids) for _, parts in tiers)

    def tier_parts(self) -> list[tuple[int, CpuParts]]:
        """(tier, the CPU parts' blocks in it), for the tiers that hold any; built once a step."""
        if self._tier_parts is None:
            self._tier_parts = []
            for tier in (TIER_CPU, TIER_DISK):
                picked = [(p, p.cpu_block_ids if tier == TIER_CPU else p.disk_block_ids) for p in self.parts]
                picked = [(p, ids) for p, ids in picked if len(ids)]
                if not picked:
                    continue
                counts = np.array([0] + [len(ids) for _, ids in picked], dtype=np.int64)
                self._tier_parts.append(
                    (
                        tier,
                        CpuParts(
                            block_ids=np.concatenate([ids for _, ids in picked]).astype(np.int64),
                            block_start=np.cumsum(counts),
                            row_start=np.array([p.row_start for p, _ in picked], dtype=np.int64),
                            row_end=np.array([p.row_end for p, _ in picked], dtype=np.int64),
                        ),
                    )
                )
        return self._tier_parts

    def _part_torch(
        self, layer_idx: int, q_host: torch.Tensor, part: ColdPart, o: torch.Tensor, lse: torch.Tensor
    ) -> int:
        """Without the kernel: gather chunks of `chunk_blocks` blocks, torch's CPU flash kernel."""
        layout = self.storage.layout
        q = q_host[part.row_start : part.row_end]
        o_acc, lse_acc = o[part.row_start : part.row_end], lse[part.row_start : part.row_end]
        blocks = [(TIER_CPU, b) for b in part.cpu_block_ids] + [(TIER_DISK, b) for b in part.disk_block_ids]
        for c0 in range(0, len(blocks), self.chunk_blocks):
            chunk = blocks[c0 : c0 + self.chunk_blocks]
            k, v = (self._gather_host(layer_idx, kv, chunk) for kv in (0, 1))  # [n * block_size, kv, dim]
            o_p, lse_p = attend_unmasked_cpu(q, k, v, self.scale, key_splits(len(chunk), layout.num_kv_heads))
            merged_o, merged_lse = merge_attention_states_ref(o_acc, lse_acc, o_p, lse_p)
            o_acc.copy_(merged_o)
            lse_acc.copy_(merged_lse)
        return len(blocks)

    def _gather_host(self, layer_idx: int, kv: int, blocks: list[tuple[int, int]]) -> torch.Tensor:
        """K (kv=0) or V (kv=1) of `blocks` of one layer, contiguous: [n * block_size, num_kv_heads,
        head_dim], in the pool's dtype (int8 pools: dequantized to fp32)."""
        layout = self.storage.layout
        parts = []
        for tier in (TIER_CPU, TIER_DISK):
            ids = [b for t, b in blocks if t == tier]
            if ids:
                pool = self.storage.tier_layer(tier, layer_idx)[
                    :, kv
                ]  # [num_tier_blocks, block_size, kv, dim]
                parts.append(pool.index_select(0, torch.tensor(ids, dtype=torch.int64)))
        out = parts[0] if len(parts) == 1 else torch.cat(parts)
        if out.dtype == torch.int8:  # rows end with their scale (kernels/kv_quant.py)
            out = dequantize_kv(out)
        return out.view(-1, layout.num_kv_heads, layout.head_dim)
