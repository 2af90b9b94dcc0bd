"""CUDA graphs of sparse decode steps (`--cold-attention sparse`), on `cold_graphs.ColdDecodeGraphs`.

A sparse decode step of an 8B model at 128K launches ~1,500 kernels (the model's layers plus, per
layer, scoring, selection, the block cache's bookkeeping and copies, the decode kernel and the
merge): an H100 step spent 34-44 ms of host time for 25 ms of GPU work. Every index of that
cold path already stays on the device (no host sync), so the whole step can replay as one graph.

Beyond what `cold_graphs.py` fixes: the sequence owns a group of the sparse block cache
(`attention/sparse/cache.py`), part of the graph's key; the scoring kernel ranks the padding past
`num_valid` below every real block, so a top-k of the budget never picks it. Capacities step by
`CAPACITY_STEP_BLOCKS` (16K tokens with 16-token blocks).

Steps that do not fit (prefill chunks, several cold sequences, disk blocks, fewer cold blocks than
the budget, a sequence without a cache group) run eagerly as before, each reason logged once.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from kvspill.attention.cold.config import ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend, ColdStep
from kvspill.attention.cold.sparse import SparseColdStep, SparseCounts, SparseSeq
from kvspill.attention.sparse.anchor import cold_set_key
from kvspill.runner.cold_graphs import ColdDecodeGraphs, common_eager_reason
from kvspill.runner.cuda_graphs import DecodeGraphs
from kvspill.runner.inputs import StepInputs
from kvspill.types import TIER_CPU

CAPACITY_STEP_BLOCKS = 1024


def eager_reason(inputs: StepInputs, budget_blocks: int) -> str | None:
    """Why a decode-only step with cold sequences cannot replay a sparse graph (None: it can);
    a phrase for the log: "sparse decode steps run without CUDA graphs while <reason>"."""
    reason = common_eager_reason(inputs)
    if reason is not None:
        return reason
    seq = inputs.cold_seqs[0]
    if seq.block_index is None or seq.req_id is None:
        return "a sequence has no request id"
    if len(seq.block_ids) < budget_blocks:
        return "a sequence has fewer cold tokens than --sparse-budget-tokens"
    return None


def graph_cold_step(
    backend: ColdAttentionBackend,
    i64: torch.Tensor,
    tiers: torch.Tensor,
    positions: torch.Tensor,
    capacity: int,
    group: int,
    scale: float,
    anchor: torch.Tensor | None = None,
) -> ColdStep:
    """The cold part of a sparse graph over its static buffers: `i64` [3, >= capacity] int64 (ids
    in the cpu tier, logical block numbers, then [num_valid, step row]), `tiers` (all TIER_CPU)
    and `positions` (arange), both at least `capacity` long; `anchor` [num_layers, >= capacity]
    bool, the anchor blocks (`attention/sparse/anchor.py`), when the backend has prompt anchors. The
    backend needs a sparse cache."""
    assert backend.summaries is not None and backend.sparse_cache is not None
    seq = SparseSeq(
        row=0,
        block_tiers=np.zeros(0, dtype=np.int64),
        block_ids=np.zeros(0, dtype=np.int64),
        tiers=tiers[:capacity],
        ids=i64[0, :capacity],
        tier_index={TIER_CPU: (positions[:capacity], i64[0, :capacity])},
        num_selected=backend.sparse_budget_blocks,
        logical=i64[1, :capacity],
        positions=positions[:capacity],
        group=group,
        num_valid=i64[2, 0],
        anchor=anchor[:, :capacity] if anchor is not None else None,
    )
    # counts come from the graph runner per replay, not from the recorded Python
    sparse = SparseColdStep.for_graph(
        backend.storage, backend.summaries, backend.sparse_cache, seq, SparseCounts()
    )
    return ColdStep.for_graph(backend, sparse, i64[2, 1:2], scale)


class SparseDecodeGraphs(ColdDecodeGraphs):
    """The graphs of sparse decode steps of one runner (see the module docstring)."""

    kind = "sparse"

    def __init__(self, decode: DecodeGraphs, backend: ColdAttentionBackend, scale: float) -> None:
        assert backend.summaries is not None and backend.sparse_cache is not None
        self.summaries = backend.summaries
        self.cache = backend.sparse_cache
        self.budget_blocks = backend.sparse_budget_blocks
        super().__init__(decode, backend, scale, self.cache.slot_of.shape[-1], CAPACITY_STEP_BLOCKS)
        device = self.storage.device
        self.tiers = torch.full((self.max_capacity,), TIER_CPU, dtype=torch.int64, device=device)
        self.positions = torch.arange(self.max_capacity, device=device)
        # the replayed sequence's anchor blocks per layer (`prepare` fills it; padding False)
        self.anchors = backend.anchors
        self.anchor = (
            torch.zeros((self.storage.layout.num_layers, self.max_capacity), dtype=torch.bool, device=device)
            if self.anchors is not None
            else None
        )
        self.anchor_source: torch.Tensor | None = None  # the masks `anchor` holds (None: zeros)

    def reason(self, inputs: StepInputs) -> str | None:
        return eager_reason(inputs, self.budget_blocks)

    def group(self, seq: ColdSeq) -> int | None:
        (group,) = self.cache.assign([seq.req_id])
        return group

    def prepare(self, seq: ColdSeq) -> None:
        ids = seq.block_ids.astype(np.int64)
        if not self.summaries.valid[TIER_CPU][ids].all():
            self.backend.wait_host()
            self.summaries.ensure(TIER_CPU, ids)
        if self.anchors is not None and self.anchor is not None:
            masks = self.anchors.masks(
                seq.req_id,
                cold_set_key(seq.block_index, ids),
                self.budget_blocks,
                partial(self._summaries, ids),
            )
            if masks is not self.anchor_source:  # the buffer holds another request's or cold set's
                self.anchor.zero_()
                if masks is not None:
                    self.anchor[:, : len(ids)] = masks
                self.anchor_source = masks

    def _summaries(self, ids: np.ndarray, layer: int, lo: int, hi: int) -> torch.Tensor:
        """Summaries of cold blocks lo..hi-1 (cpu-tier `ids`) of one layer, for the anchors."""
        index = torch.from_numpy(ids[lo:hi]).to(self.storage.device)
        return self.summaries.layer(TIER_CPU, layer).index_select(0, index)

    def cold_step(self, capacity: int, group: int) -> ColdStep:
        return graph_cold_step(
            self.backend, self.i64, self.tiers, self.positions, capacity, group, self.scale, self.anchor
        )

    def count(self, num_cold: int) -> None:
        stats = self.backend.stats
        layers = self.storage.layout.num_layers
        stats.num_steps += 1
        stats.sparse.selected_blocks += self.budget_blocks * layers
        stats.sparse.cold_blocks += num_cold * layers
