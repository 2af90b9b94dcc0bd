"""Sparse cold attention (`--cold-attention sparse`): the decode rows of a step attend only the
cold blocks their queries select, within a token budget.

Per layer and sequence with one query row this step: score every cold block's summary against
the row's queries (`kv/sparse_select.py`, on the compute device), keep the `budget_blocks` best
(one block list per sequence for all its kv heads: the union of the heads' rankings, see
there), gather those blocks of that layer into a device staging buffer and run the decode
kernel over them; the partial (o, lse) merges by LSE into the step's cold accumulator, and the
gpu-resident part (sink blocks, hot window) stays exact in the attention backend.

Gathers: on CUDA, blocks in the pinned cpu pool are read in place by the zero-copy gather kernel
(`kernels/uva_gather.py`) on the copy stream, with the block ids chosen on the device (no host
sync); a sequence with disk blocks (or an unpinned pool) brings its choice to the host first
and copies through torch. Off CUDA the "device" is the host and everything is an index_select.
Selection depends on each layer's queries, so nothing is prefetched across layers.

Prefill chunks (several query rows) take the exact paths (`ColdStep`): a chunk is compute-bound
and its rows would each want other blocks. Not done yet: a GPU cache of recently selected
blocks across steps, and per-kv-head block lists.

Invariant: the summaries of every selected sequence's blocks are valid before scoring
(`BlockSummaries.ensure`); a budget of at least the cold length selects every block, so the
result equals exact attention up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.uva_gather import gather_blocks
from kvspill.kv.block_summary import BlockSummaries
from kvspill.kv.cold_math import merge_rows_into
from kvspill.kv.sparse_select import quest_scores, select_blocks
from kvspill.kv.storage import TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK


@dataclass(frozen=True)
class SparseSeq:
    """One decode sequence's cold blocks, as the sparse path needs them."""

    row: int  # its query row in the step's cold-row space (`ColdStep.rows`)
    block_tiers: np.ndarray  # [num_cold] TIER_CPU or TIER_DISK, logical order
    block_ids: np.ndarray  # [num_cold] int64 ids within each block's tier
    # per tier holding any: (positions in the sequence's cold list, ids in the tier), both on the device
    tier_index: dict[int, tuple[torch.Tensor, torch.Tensor]]
    num_selected: int  # min(budget_blocks, num_cold)

    @property
    def num_cold(self) -> int:
        return len(self.block_ids)


@dataclass
class SparseCounts:
    """Running totals (summed over layers), kept by the backend (`ColdStats`)."""

    selected_blocks: int = 0
    cold_blocks: int = 0
    bytes: int = 0


class SparseColdStep:
    """The sparse part of one step: its decode sequences, fixed for all layers."""

    def __init__(
        self,
        storage: TieredKVStorage,
        summaries: BlockSummaries,
        seqs: list[tuple[int, np.ndarray, np.ndarray]],  # (cold row, block tiers, block ids)
        budget_blocks: int,
        counts: SparseCounts,
        ensure_host_ready: Callable[[], None],
    ) -> None:
        """`ensure_host_ready()` waits for async copies into the cpu pool; called before the host
        reads it (summaries made late, gathers through the host)."""
        self.storage = storage
        self.ensure_host_ready = ensure_host_ready
        self.summaries = summaries
        self.counts = counts
        device = storage.device
        self.seqs: list[SparseSeq] = []
        for row, tiers, ids in seqs:
            index = {}
            for tier in (TIER_CPU, TIER_DISK):
                pos = np.flatnonzero(tiers == tier)
                if len(pos):
                    tier_ids = ids[pos].astype(np.int64)
                    if not summaries.valid[tier][tier_ids].all():
                        ensure_host_ready()
                        summaries.ensure(tier, tier_ids)
                    index[tier] = (torch.from_numpy(pos).to(device), torch.from_numpy(tier_ids).to(device))
            self.seqs.append(SparseSeq(row, tiers, ids.astype(np.int64), index, min(budget_blocks, len(ids))))
        self.offsets = np.cumsum([0] + [s.num_selected for s in self.seqs])
        width = max(s.num_selected for s in self.seqs)
        tables = torch.zeros((len(self.seqs), width), dtype=torch.int32)
        for i, s in enumerate(self.seqs):
            tables[i, : s.num_selected] = torch.arange(int(self.offsets[i]), int(self.offsets[i + 1]))
        block_size = storage.layout.block_size
        self.block_tables = tables.to(device)  # [num_seqs, width] staging ids
        self.seq_lens = torch.tensor([s.num_selected * block_size for s in self.seqs], dtype=torch.int32).to(
            device
        )
        self.rows = torch.tensor([s.row for s in self.seqs], dtype=torch.int64).to(device)
        self.uva = device.type == "cuda" and storage.cpu_pinned

    def attend(
        self, layer_idx: int, q_cold: torch.Tensor, scale: float, acc_o: torch.Tensor, acc_lse: torch.Tensor
    ) -> None:
        """Select, gather and attend this layer's blocks for every sparse row; merge into acc."""
        layout = self.storage.layout
        q = q_cold.index_select(0, self.rows)  # [num_seqs, num_heads, head_dim]
        staging = torch.empty(
            (int(self.offsets[-1]), 2, layout.block_size, layout.num_kv_heads, layout.row_dim),
            dtype=layout.dtype,
            device=self.storage.device,
        )
        for i, seq in enumerate(self.seqs):
            chosen = select_blocks(
                quest_scores(q[i : i + 1], self._summary(seq, layer_idx)), seq.num_selected
            )
            self._gather(seq, layer_idx, chosen, staging[int(self.offsets[i]) : int(self.offsets[i + 1])])
            self.counts.selected_blocks += seq.num_selected
            self.counts.cold_blocks += seq.num_cold
        self.counts.bytes += staging.numel() * staging.element_size()
        decode = paged_decode_attention if q.is_cuda else paged_decode_attention_ref
        o, lse = decode(q, staging, self.block_tables, self.seq_lens, scale)
        merge_rows_into(acc_o, acc_lse, self.rows, o.float(), lse)

    def _summary(self, seq: SparseSeq, layer_idx: int) -> torch.Tensor:
        """[num_cold, 2, num_kv_heads, head_dim]: the sequence's summaries in logical block order."""
        if len(seq.tier_index) == 1:
            ((tier, (_, ids)),) = seq.tier_index.items()
            return self.summaries.layer(tier, layer_idx).index_select(0, ids)
        layout = self.storage.layout
        out = torch.empty(
            (seq.num_cold, 2, layout.num_kv_heads, layout.head_dim),
            dtype=self.summaries.dtype,
            device=self.storage.device,
        )
        for tier, (pos, ids) in seq.tier_index.items():
            out.index_copy_(0, pos, self.summaries.layer(tier, layer_idx).index_select(0, ids))
        return out

    def _gather(self, seq: SparseSeq, layer_idx: int, chosen: torch.Tensor, dst: torch.Tensor) -> None:
        """dst[j] = block chosen[j] of the sequence, this layer: [n, 2, block_size, num_kv_heads, head_dim]."""
        stream = self.storage.copy_stream
        if self.uva and stream is not None and list(seq.tier_index) == [TIER_CPU]:
            ids = seq.tier_index[TIER_CPU][1].index_select(0, chosen)
            # The copy stream orders these reads of the pinned pool with every host write into it
            # (kv/transfer.py waits for that stream before one).
            compute = torch.cuda.current_stream(self.storage.device)
            stream.wait_stream(compute)
            with torch.cuda.stream(stream):
                gather_blocks(self.storage.tier_layer(TIER_CPU, layer_idx), ids, dst)
            ids.record_stream(stream)
            dst.record_stream(stream)
            compute.wait_stream(stream)
            return
        picked = chosen.cpu().numpy()  # syncs on CUDA: the disk tier is read by the host
        self.ensure_host_ready()
        tiers, ids = seq.block_tiers[picked], seq.block_ids[picked]
        for tier in (TIER_CPU, TIER_DISK):
            pos = np.flatnonzero(tiers == tier)
            if len(pos):
                src = self.storage.tier_layer(tier, layer_idx).index_select(0, torch.from_numpy(ids[pos]))
                dst.index_copy_(0, torch.from_numpy(pos).to(dst.device), src.to(dst.device))
