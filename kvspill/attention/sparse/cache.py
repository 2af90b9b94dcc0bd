"""GPU cache of the cold blocks that sparse decode rows selected (`--cold-attention sparse`).

Consecutive decode steps of a sequence select mostly the same cold blocks (its queries move
slowly), so re-reading them over PCIe every step is waste: on W3 at 128K (H100) the gather of
a 4096-token budget was 10.6 ms of a 53 ms step. Each cached sequence owns a *group*: per layer
`budget_blocks` slots of device memory, `slot_block[layer, slot]` (the logical block a slot
holds) and `slot_of[layer, block]` (the inverse). Per step and layer the chosen blocks that are
already there are attended in place; only the misses are copied, into the slots of blocks that
were not chosen again (`cache_update`), so a step moves only what its selection changed.

Keys are *logical* block indices of the sequence (position // block_size): a block's KV never
changes once written, wherever it lives (cpu, disk, moved between them), so a cached copy stays
right. Groups belong to request ids; a request absent from a step's sparse rows loses its group
(finished, preempted, aborted, or running a prefill chunk), so a group never outlives the KV it
copied. Requests beyond the groups take the uncached path (`cold_sparse`).

Memory: `num_groups * budget_blocks * block bytes` on the device, counted by the planner
(`plan/sparse.py`, `sparse_gpu_bytes`).
"""

from __future__ import annotations

import torch

from kvspill.kernels.sparse_kernels import cache_update
from kvspill.kernels.uva_gather import gather_blocks_to
from kvspill.storage.storage import KVLayout


def cache_update_ref(
    slot_of: torch.Tensor, slot_block: torch.Tensor, chosen: torch.Tensor, slot_base: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference of `kernels/sparse_kernels.cache_update` (same results and state):
    the r-th missing chosen block (in `chosen` order) goes to the r-th free slot (ascending)."""
    slot = slot_of[chosen].to(torch.int64)
    hit = slot >= 0
    kept = torch.zeros(slot_block.shape[0], dtype=torch.bool, device=slot.device)
    kept[slot[hit]] = True
    free_slots = torch.nonzero(~kept).flatten()
    misses = torch.nonzero(~hit).flatten()
    dst = free_slots[: misses.shape[0]]
    old = slot_block[dst]
    slot_of[old[old >= 0]] = -1
    slot_of[chosen[misses]] = dst.to(slot_of.dtype)
    slot_block[dst] = chosen[misses]
    slot[misses] = dst
    copy_dst = torch.full_like(slot, -1)
    copy_dst[misses] = dst + slot_base
    return (slot + slot_base).to(torch.int32), copy_dst


class SparseBlockCache:
    """The cache of every cached sequence, all layers (see the module docstring)."""

    def __init__(
        self, layout: KVLayout, device: torch.device, budget_blocks: int, num_groups: int, max_blocks: int
    ):
        self.layout = layout
        self.device = device
        self.num_slots = budget_blocks
        self.num_groups = num_groups
        # per layer [num_groups * budget_blocks, 2, block_size, num_kv_heads, row_dim] of its own
        # format (int8: a value and a scale plane per block, kv_quant.py; a mixed pool's layers
        # differ, storage/layout.py)
        slots = num_groups * budget_blocks
        self.data = [
            torch.empty((slots, *layout.layer_shape(i)), dtype=layout.dtype_of(i), device=device)
            for i in range(layout.num_layers)
        ]
        self.slot_block = torch.full(
            (num_groups, layout.num_layers, budget_blocks), -1, dtype=torch.int64, device=device
        )
        self.slot_of = torch.full(
            (num_groups, layout.num_layers, max_blocks), -1, dtype=torch.int32, device=device
        )
        self.scratch = torch.zeros((2, budget_blocks), dtype=torch.int32, device=device)
        self.owner: dict[str, int] = {}  # request id -> group
        # blocks copied in (misses), summed on the device: read by `counters` (no sync per step)
        self.copied_blocks = torch.zeros((), dtype=torch.int64, device=device)
        self.use_kernel = device.type == "cuda"

    def assign(self, req_ids: list[str | None]) -> list[int | None]:
        """The group of each sparse request of this step (None: uncached). Groups of requests not
        in the step are freed; a new owner starts from an empty group."""
        present = {r for r in req_ids if r is not None}
        for gone in [r for r in self.owner if r not in present]:
            del self.owner[gone]
        free = sorted(set(range(self.num_groups)) - set(self.owner.values()))
        groups: list[int | None] = []
        for r in req_ids:
            if r is not None and r not in self.owner and free:
                g = free.pop(0)
                self.slot_block[g].fill_(-1)
                self.slot_of[g].fill_(-1)
                self.owner[r] = g
            groups.append(self.owner.get(r) if r is not None else None)
        return groups

    def update(
        self,
        group: int,
        layer_idx: int,
        positions: torch.Tensor,
        logical: torch.Tensor,
        ids: torch.Tensor,
        table: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write into `table` (int32 [k]) the slot in `layer(layer_idx)` of each chosen block: the
        logical blocks `logical[positions]` (distinct; all int64 on the device). Return the copy
        destinations (int64 [k], -1 for hits) and the blocks' tier ids `ids[positions]`, which
        `fill` copies."""
        slot_of, slot_block = self.slot_of[group, layer_idx], self.slot_block[group, layer_idx]
        base = group * self.num_slots
        if self.use_kernel:
            _, copy_dst, src_ids = cache_update(
                slot_of, slot_block, positions, logical, ids, self.scratch, base, self.copied_blocks, table
            )
            return copy_dst, src_ids
        slots, copy_dst = cache_update_ref(slot_of, slot_block, logical.index_select(0, positions), base)
        table.copy_(slots)
        self.copied_blocks += (copy_dst >= 0).sum()
        return copy_dst, ids.index_select(0, positions)

    def layer(self, layer_idx: int) -> torch.Tensor:
        """[num_groups * budget_blocks, 2, block_size, num_kv_heads, row_dim] of one layer."""
        return self.data[layer_idx]

    def fill(self, layer_idx: int, src: torch.Tensor, src_ids: torch.Tensor, copy_dst: torch.Tensor) -> None:
        """Copy block src[src_ids[i]] into slot copy_dst[i] of the layer, where copy_dst[i] >= 0."""
        gather_blocks_to(src, src_ids, copy_dst, self.data[layer_idx])
