"""Sparse cold attention (`--cold-attention sparse`): the decode rows of a step attend only the
cold blocks their queries select, within a token budget.

Per layer and sequence with one query row this step: rank every cold block by its summary
against the row's queries (`attention/sparse/select.py`; on CUDA one Triton kernel reads the summaries
where they lie, `kernels/sparse_kernels.block_keys`), keep the `budget_blocks` best (one block
list per sequence for all its kv heads: the union of the heads' rankings, see there), bring
those blocks of that layer to the device and run the decode kernel over them; the partial
(o, lse) merges by LSE into the step's cold accumulator, and the gpu-resident part (sink
blocks, hot window) stays exact in the attention backend.

Where the chosen blocks come from:
- Cached sequences (`attention/sparse/cache.py`, the first `sparse_cache_seqs` decode requests whose
  cold blocks are all in the cpu tier, pinned on CUDA): the blocks chosen last step stay in
  device slots; only the newly chosen ones are copied, by the zero-copy gather kernel on the
  copy stream, with every index on the device (no host sync).
- Others: a per-step staging buffer, filled by the zero-copy gather (pinned cpu blocks) or
  through the host (disk blocks or an unpinned pool: the choice comes to the host first).
Off CUDA the "device" is the host and every copy is an index_select.
Selection depends on each layer's queries, so nothing is prefetched across layers.
With `--sparse-prompt-window` a share of the budget is the blocks the prompt's last queries chose
(`attention/sparse/anchor.py`): their ranking keys are raised above every score, so the one selection
keeps them first.

Prefill chunks (several query rows) take the exact paths (`ColdStep`): a chunk is compute-bound
and its rows would each want other blocks. Not done yet: per-kv-head block lists.

Invariant: the summaries of every selected sequence's blocks are valid before scoring
(`BlockSummaries.ensure`); a budget of at least the cold length selects every block, so the
result equals exact attention up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import torch

from kvspill.attention.cold.merge import merge_rows_into
from kvspill.attention.cold.step_sync import CopyStream, recorded_event
from kvspill.attention.sparse.anchor import PromptAnchors, boost_keys, cold_set_key
from kvspill.attention.sparse.cache import SparseBlockCache
from kvspill.attention.sparse.select import block_scores, select_from_keys
from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.sparse_kernels import block_keys, pad_keys, ranking_keys
from kvspill.kernels.uva_gather import gather_blocks, index_copy_rows
from kvspill.storage.storage import TieredKVStorage
from kvspill.storage.summary import BlockSummaries
from kvspill.types import TIER_CPU, TIER_DISK

# Shortest split of the decode kernel over the chosen blocks. A step attends a full budget of
# keys for one or a few rows: the default (256 keys for head_dim 128) gave 16 splits x 8 kv heads
# for a 4096-token budget, too few programs to use the GPU's bandwidth (54 us per layer for 16 MB
# on an H200, 2026-11-27); 64 gives 64 splits at batch 1.
_MIN_SPLIT_TOKENS = 64


@dataclass(frozen=True)
class SparseInput:
    """A decode sequence of the step with cold blocks, as `ColdStep` hands it over."""

    row: int  # its query row in the step's cold-row space (`ColdStep.rows`)
    block_tiers: np.ndarray  # [num_cold] TIER_CPU or TIER_DISK, logical order
    block_ids: np.ndarray  # [num_cold] ids within each block's tier
    block_index: np.ndarray | None = None  # [num_cold] logical block numbers (None: not cacheable)
    req_id: str | None = None


@dataclass(frozen=True)
class SparseSeq:
    """One decode sequence's cold blocks, as the sparse path needs them."""

    row: int
    block_tiers: np.ndarray  # [num_cold] TIER_CPU or TIER_DISK, logical order
    block_ids: np.ndarray  # [num_cold] int64 ids within each block's tier
    tiers: torch.Tensor  # the same two on the device (int64), for the scoring kernel
    ids: torch.Tensor
    # per tier holding any: (positions in the sequence's cold list, ids in the tier), both on the device
    tier_index: dict[int, tuple[torch.Tensor, torch.Tensor]]
    num_selected: int  # min(budget_blocks, num_cold)
    logical: torch.Tensor | None  # [num_cold] int64 logical block numbers on the device (cached only)
    positions: torch.Tensor  # arange(num_cold) on the device (the selection's index space)
    group: int | None = None  # its group in the sparse cache; None: staged each step
    num_valid: torch.Tensor | None = None  # CUDA graphs: int64 scalar, the real blocks (rest padding)
    # [num_layers, num_cold] bool: each layer's anchor blocks (`attention/sparse/anchor.py`), kept first
    anchor: torch.Tensor | None = None

    @property
    def num_cold(self) -> int:
        return len(self.block_ids)


@dataclass
class SparseCounts:
    """Running totals (summed over layers), kept by the backend (`ColdStats`)."""

    selected_blocks: int = 0
    cold_blocks: int = 0
    bytes: int = 0  # staged (uncached) bytes; the cache counts its own copies


@dataclass(frozen=True)
class SparseFetched:
    """One layer's chosen blocks on the device (`SparseColdStep.fetch`)."""

    q: torch.Tensor  # [num_seqs, num_heads, head_dim]: the sparse rows' queries
    staging: torch.Tensor | None  # the staged (uncached) sequences' blocks; cached ones are in the cache
    hot_start: torch.cuda.Event | None = None  # where the gpu tier's attention starts; None: at once


class SparseColdStep:
    """The sparse part of one step: its decode sequences, fixed for all layers."""

    def __init__(
        self,
        storage: TieredKVStorage,
        summaries: BlockSummaries,
        inputs: list[SparseInput],
        budget_blocks: int,
        counts: SparseCounts,
        ensure_host_ready: Callable[[], None],
        cache: SparseBlockCache | None = None,
        anchors: PromptAnchors | None = None,
    ) -> None:
        """`ensure_host_ready()` waits for async copies into the cpu pool; called before the host
        reads it (summaries made late, gathers through the host). `anchors`: the prompt-guided
        share of the budget (`attention/sparse/anchor.py`), None: the step's queries choose it all."""
        self._setup(storage, summaries, counts, ensure_host_ready, cache)
        cacheable = [self._cacheable(x) for x in inputs]
        groups = (
            cache.assign([x.req_id if ok else None for x, ok in zip(inputs, cacheable, strict=True)])
            if cache
            else [None] * len(inputs)
        )
        seqs = [self._seq(x, budget_blocks, g) for x, g in zip(inputs, groups, strict=True)]
        if anchors is not None:
            seqs = [self.with_anchor(anchors, x, seq) for x, seq in zip(inputs, seqs, strict=True)]
        self._set_seqs(seqs)

    def with_anchor(self, anchors: PromptAnchors, x: SparseInput, seq: SparseSeq) -> SparseSeq:
        """`seq` with its request's anchor masks (unchanged when it has none)."""
        key = cold_set_key(x.block_index, x.block_ids)
        masks = anchors.masks(x.req_id, key, seq.num_selected, partial(self._summary, seq))
        return seq if masks is None else replace(seq, anchor=masks)

    @classmethod
    def for_graph(
        cls,
        storage: TieredKVStorage,
        summaries: BlockSummaries,
        cache: SparseBlockCache,
        seq: SparseSeq,
        counts: SparseCounts,
    ) -> SparseColdStep:
        """The step of a CUDA graph (`runner/sparse_graphs.py`): one cached sequence whose tensors
        are the graph's static buffers (padded to a fixed length, `seq.num_valid` real), so every
        tensor this object builds lives as long as the graph. Its copies run on the capturing
        stream: the graph runner orders the copy stream after each replay."""
        step = cls.__new__(cls)
        step._setup(storage, summaries, counts, lambda: None, cache)
        step.side_stream = False
        step._set_seqs([seq])
        return step

    def _setup(
        self,
        storage: TieredKVStorage,
        summaries: BlockSummaries,
        counts: SparseCounts,
        ensure_host_ready: Callable[[], None],
        cache: SparseBlockCache | None,
    ) -> None:
        self.storage = storage
        self.ensure_host_ready = ensure_host_ready
        self.summaries = summaries
        self.counts = counts
        self.cache = cache
        self.uva = storage.device.type == "cuda" and storage.cpu_pinned
        self.side_stream = self.uva  # gathers of pinned blocks run on the storage's copy stream

    def _set_seqs(self, seqs: list[SparseSeq]) -> None:
        self.seqs = seqs
        device = self.storage.device
        self.num_selected = sum(s.num_selected for s in self.seqs)  # per layer
        self.num_cold = sum(s.num_cold for s in self.seqs)
        self.cached = [i for i, s in enumerate(self.seqs) if s.group is not None]
        self.staged = [i for i, s in enumerate(self.seqs) if s.group is None]
        block_size = self.storage.layout.block_size
        self.offsets = np.cumsum([0] + [self.seqs[i].num_selected for i in self.staged])

        def tables(indices: list[int], starts: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            width = max([self.seqs[i].num_selected for i in indices], default=1)
            t = torch.zeros((len(indices), width), dtype=torch.int32)
            for j, (i, start) in enumerate(zip(indices, starts, strict=True)):
                t[j, : self.seqs[i].num_selected] = torch.arange(start, start + self.seqs[i].num_selected)
            lens = torch.tensor([self.seqs[i].num_selected * block_size for i in indices], dtype=torch.int32)
            rows = torch.tensor([self.seqs[i].row for i in indices], dtype=torch.int64)
            return t.to(device), lens.to(device), rows.to(device)

        # staged: fixed tables into the step's staging buffer; cached: rows rewritten per layer
        self.staged_tables, self.staged_lens, self.staged_rows = tables(
            self.staged, [int(o) for o in self.offsets[:-1]]
        )
        self.cached_tables, self.cached_lens, self.cached_rows = tables(self.cached, [0] * len(self.cached))
        self.rows = torch.tensor([s.row for s in self.seqs], dtype=torch.int64).to(device)
        # which of the step's sparse rows (in `rows` order) each part attends
        self.cached_sel = torch.tensor(self.cached, dtype=torch.int64).to(device)
        self.staged_sel = torch.tensor(self.staged, dtype=torch.int64).to(device)

    def _cacheable(self, x: SparseInput) -> bool:
        return (
            self.cache is not None
            and x.block_index is not None
            and x.req_id is not None
            and bool((x.block_tiers == TIER_CPU).all())
            and (self.uva or self.storage.device.type != "cuda")
        )

    def _seq(self, x: SparseInput, budget_blocks: int, group: int | None) -> SparseSeq:
        device = self.storage.device
        ids = x.block_ids.astype(np.int64)
        ids_dev = torch.from_numpy(ids).to(device)
        positions = torch.arange(len(ids), device=device)
        index = {}
        for tier in (TIER_CPU, TIER_DISK):
            pos = np.flatnonzero(x.block_tiers == tier)
            if len(pos):
                tier_ids = ids[pos]
                if not self.summaries.valid[tier][tier_ids].all():
                    self.ensure_host_ready()
                    self.summaries.ensure(tier, tier_ids)
                if len(pos) == len(ids):  # one tier (the usual case): no second copy up
                    index[tier] = (positions, ids_dev)
                else:
                    pos_dev = torch.from_numpy(pos).to(device)
                    index[tier] = (pos_dev, ids_dev.index_select(0, pos_dev))
        logical = None
        if group is not None:
            assert x.block_index is not None
            logical = torch.from_numpy(x.block_index.astype(np.int64)).to(device)
        return SparseSeq(
            x.row,
            x.block_tiers,
            ids,
            torch.from_numpy(x.block_tiers.astype(np.int64)).to(device),
            ids_dev,
            index,
            min(budget_blocks, len(ids)),
            logical,
            positions,
            group,
        )

    def attend(
        self, layer_idx: int, q_cold: torch.Tensor, scale: float, acc_o: torch.Tensor, acc_lse: torch.Tensor
    ) -> None:
        """Select, fetch and attend this layer's blocks for every sparse row; merge into acc."""
        self.attend_fetched(layer_idx, self.fetch(layer_idx, q_cold), scale, acc_o, acc_lse)

    def fetch(self, layer_idx: int, q_cold: torch.Tensor, hot_after: str = "none") -> SparseFetched:
        """Select this layer's blocks for every sparse row and bring them to the device (the cache's
        slots, or a staging buffer). It reads only cold blocks and their summaries, so it may run
        beside the gpu tier's attention (`ColdStep.begin`): it starts once the blocks are scored or
        chosen with `hot_after` "keys" or "select" (`SparseFetched.hot_start`), at once with "none"."""
        q = q_cold.index_select(0, self.rows)  # [num_seqs, num_heads, head_dim]
        keys = [self._keys(seq, layer_idx, q[i]) for i, seq in enumerate(self.seqs)]
        hot_start = recorded_event() if hot_after == "keys" and q.is_cuda else None
        chosen = [
            select_from_keys(k, s.num_selected, s.positions) for k, s in zip(keys, self.seqs, strict=True)
        ]
        if hot_after == "select" and q.is_cuda:
            hot_start = recorded_event()
        self.counts.selected_blocks += self.num_selected
        self.counts.cold_blocks += self.num_cold
        if self.cached:
            self._fill_cache(layer_idx, chosen)
        staging = self._stage(layer_idx, chosen) if self.staged else None
        if staging is not None:
            self.counts.bytes += staging.numel() * staging.element_size()
        return SparseFetched(q, staging, hot_start)

    def attend_fetched(
        self, layer_idx: int, fetched: SparseFetched, scale: float, acc_o: torch.Tensor, acc_lse: torch.Tensor
    ) -> None:
        """Attend the blocks `fetch` brought for this layer; merge into acc."""
        q, staging = fetched.q, fetched.staging
        decode = (
            partial(paged_decode_attention, min_split_tokens=_MIN_SPLIT_TOKENS)
            if q.is_cuda
            else paged_decode_attention_ref
        )
        if self.cached:
            assert self.cache is not None
            o, lse = decode(
                q if not self.staged else q.index_select(0, self.cached_sel),
                self.cache.layer(layer_idx),
                self.cached_tables,
                self.cached_lens,
                scale,
            )
            merge_rows_into(acc_o, acc_lse, self.cached_rows, o.float(), lse)
        if staging is not None:
            o, lse = decode(
                q if not self.cached else q.index_select(0, self.staged_sel),
                staging,
                self.staged_tables,
                self.staged_lens,
                scale,
            )
            merge_rows_into(acc_o, acc_lse, self.staged_rows, o.float(), lse)

    def _keys(self, seq: SparseSeq, layer_idx: int, q_row: torch.Tensor) -> torch.Tensor:
        """Ranking keys [num_kv_heads, num_cold] of the row over the sequence's cold blocks, the
        anchor blocks (if any) first."""
        if q_row.is_cuda:
            disk = self.summaries.layer(TIER_DISK, layer_idx) if TIER_DISK in seq.tier_index else None
            cpu = self.summaries.layer(TIER_CPU, layer_idx)
            keys = block_keys(q_row, cpu, disk, seq.tiers, seq.ids, seq.num_valid)
        else:
            keys = ranking_keys(block_scores(q_row[None], self._summary(seq, layer_idx)))
            keys = keys if seq.num_valid is None else pad_keys(keys, seq.num_valid, seq.positions)
        return keys if seq.anchor is None else boost_keys(keys, seq.anchor[layer_idx])

    def _fill_cache(self, layer_idx: int, chosen: list[torch.Tensor]) -> None:
        """Bring the cached sequences' chosen blocks of this layer into their cache slots."""
        assert self.cache is not None
        fills = []
        for j, i in enumerate(self.cached):
            seq = self.seqs[i]
            table = self.cached_tables[j, : seq.num_selected]
            assert seq.logical is not None and seq.group is not None
            copy_dst, ids = self.cache.update(seq.group, layer_idx, chosen[i], seq.logical, seq.ids, table)
            fills.append((ids, copy_dst))
        src = self.storage.tier_layer(TIER_CPU, layer_idx)
        with self._on_copy_stream() as stream:
            for ids, copy_dst in fills:
                self.cache.fill(layer_idx, src, ids, copy_dst)
                if stream is not None:
                    ids.record_stream(stream)
                    copy_dst.record_stream(stream)

    def _on_copy_stream(self) -> CopyStream:
        return CopyStream(self.storage.copy_stream if self.side_stream else None, self.storage.device)

    def _stage(self, layer_idx: int, chosen: list[torch.Tensor]) -> torch.Tensor:
        layout = self.storage.layout
        staging = torch.empty(
            (int(self.offsets[-1]), *layout.layer_shape(layer_idx)),
            dtype=layout.dtype_of(layer_idx),
            device=self.storage.device,
        )
        for j, i in enumerate(self.staged):
            dst = staging[int(self.offsets[j]) : int(self.offsets[j + 1])]
            self._gather(self.seqs[i], layer_idx, chosen[i], dst)
        return staging

    def _summary(self, seq: SparseSeq, layer_idx: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """[num_cold, 2, num_kv_heads, head_dim]: the sequence's summaries in logical block order
        (of cold blocks lo..hi-1 only, when given)."""
        if len(seq.tier_index) == 1:
            ((tier, (_, ids)),) = seq.tier_index.items()
            return self.summaries.layer(tier, layer_idx).index_select(0, ids[lo:hi])
        # blocks in both tiers (off CUDA, or the anchors' rare rescoring): each tier's rows of the slice
        tiers, tier_ids = seq.block_tiers[lo:hi], seq.block_ids[lo:hi]
        layout, device = self.storage.layout, self.storage.device
        out = torch.empty(
            (len(tier_ids), 2, layout.num_kv_heads, layout.head_dim),
            dtype=self.summaries.dtype,
            device=device,
        )
        for tier in seq.tier_index:
            pos = np.flatnonzero(tiers == tier)
            if len(pos):
                ids = torch.from_numpy(tier_ids[pos]).to(device)
                rows = self.summaries.layer(tier, layer_idx).index_select(0, ids)
                index_copy_rows(out, torch.from_numpy(pos).to(device), rows)
        return out

    def _gather(self, seq: SparseSeq, layer_idx: int, chosen: torch.Tensor, dst: torch.Tensor) -> None:
        """dst[j] = block chosen[j] of the sequence, this layer: [n, 2, block_size, num_kv_heads, head_dim]."""
        if self.uva and list(seq.tier_index) == [TIER_CPU]:
            ids = seq.tier_index[TIER_CPU][1].index_select(0, chosen)
            with self._on_copy_stream() as stream:
                gather_blocks(self.storage.tier_layer(TIER_CPU, layer_idx), ids, dst)
                if stream is not None:
                    ids.record_stream(stream)
                    dst.record_stream(stream)
            return
        picked = chosen.cpu().numpy()  # syncs on CUDA: the disk tier is read by the host
        self.ensure_host_ready()
        tiers, ids = seq.block_tiers[picked], seq.block_ids[picked]
        for tier in (TIER_CPU, TIER_DISK):
            pos = np.flatnonzero(tiers == tier)
            if len(pos):
                pos = pos[np.argsort(ids[pos], kind="stable")]  # ascending ids: disk reads coalesce
                src = torch.empty((len(pos), *dst.shape[1:]), dtype=dst.dtype)
                self.storage.gather_layer(tier, layer_idx, ids[pos], src)
                index_copy_rows(dst, torch.from_numpy(pos).to(dst.device), src.to(dst.device))
