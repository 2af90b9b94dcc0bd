"""CUDA graphs of sparse decode steps (`--cold-attention sparse`).

A sparse decode step of an 8B model at 128K launches ~1,500 kernels (the model's layers plus, per
layer, scoring, selection, the block cache's bookkeeping and copies, the decode kernel and the
merge): an H100 step spent 34-44 ms of host time for 25 ms of GPU work. Every index of that
cold path already stays on the device (no host sync), so the whole step can replay as one graph.

What a graph fixes and what changes per step:
- The batch bucket and the decode inputs: `DecodeGraphs`' static buffers (the gpu-tier part of
  each sequence: compacted block table, `gpu_seq_lens`).
- One sequence with cold blocks, all in the pinned cpu tier, owning a group of the sparse block
  cache (`kv/sparse_cache.py`). Its cold block list (ids in the cpu tier and logical numbers) is
  padded to a *capacity* (a multiple of `CAPACITY_STEP_BLOCKS`); `num_valid` says how many are
  real (the scoring kernel ranks the padding below every real block, so a top-k of the budget
  never picks it). Its step row and cache group are static too.
- A graph per (bucket, capacity, group), captured the first time a step needs it: the capture
  runs that step once eagerly through the static buffers (storing the same K/V and updating the
  cache's maps exactly as the replay then finds them), records it, and replays it. A sequence
  grows one cold block every `block_size` tokens, so a new capacity comes every
  `CAPACITY_STEP_BLOCKS * block_size` tokens (16K with 16-token blocks). At most `MAX_GRAPHS`
  are kept (least recently used first out).

Steps that do not fit (prefill chunks, several cold sequences, disk blocks, fewer cold blocks than
the budget, a sequence without a cache group) run eagerly as before, each reason logged once
(`eager_reason`); tensor parallelism does not use these graphs (every rank would have to capture
at the same step).

Ordering: the eager path copies chosen blocks on the storage's copy stream, and host writes into
the pinned pool wait for that stream (`kv/transfer.py`). A replay copies on the compute stream,
so after it the copy stream waits for the compute stream: those host writes still wait for the
replay's reads.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.kv.cold_attention import ColdAttentionBackend, ColdStep
from kvspill.kv.cold_config import ColdSeq
from kvspill.kv.cold_sparse import SparseColdStep, SparseCounts, SparseSeq
from kvspill.runner.async_output import DeviceFeed
from kvspill.runner.cuda_graphs import DecodeGraphs, HostSets
from kvspill.runner.inputs import StepInputs
from kvspill.types import TIER_CPU

logger = logging.getLogger(__name__)

CAPACITY_STEP_BLOCKS = 1024
MAX_GRAPHS = 4


@dataclass
class _Entry:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor
    greedy_ids: torch.Tensor
    # The graph reads tensors that the cold step made before the capture (its block tables, row
    # indices, selections): they live as long as the graph. Freed, the allocator handed their
    # memory to later tensors and replays read garbage indices (a device-side assert in an
    # index_select on SmolLM2 at 2K, H200).
    cold: ColdStep


def eager_reason(inputs: StepInputs, budget_blocks: int) -> str | None:
    """Why a decode-only step with cold sequences cannot replay a sparse graph (None: it can);
    a phrase for the log: "sparse decode steps run without CUDA graphs while <reason>"."""
    if inputs.num_decodes != len(inputs.req_ids):
        return "a step carries prefill chunks"
    if len(inputs.cold_seqs) != 1:
        return "several sequences have cold blocks (graphs take one)"
    seq = inputs.cold_seqs[0]
    if seq.block_index is None or seq.req_id is None:
        return "a sequence has no request id"
    if not bool((seq.block_tiers == TIER_CPU).all()):
        return "a sequence has blocks in the disk tier (graphs take cpu-tier blocks)"
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
) -> ColdStep:
    """The cold part of a sparse graph over its static buffers: `i64` [3, >= capacity] int64 (ids
    in the cpu tier, logical block numbers, then [num_valid, step row]), `tiers` (all TIER_CPU)
    and `positions` (arange), both at least `capacity` long. The backend needs a sparse cache."""
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
    )
    # counts come from the graph runner per replay, not from the recorded Python
    sparse = SparseColdStep.for_graph(
        backend.storage, backend.summaries, backend.sparse_cache, seq, SparseCounts()
    )
    return ColdStep.for_graph(backend, sparse, i64[2, 1:2], scale)


class SparseDecodeGraphs:
    """The graphs of sparse decode steps of one runner (see the module docstring)."""

    def __init__(self, decode: DecodeGraphs, backend: ColdAttentionBackend, scale: float) -> None:
        assert backend.summaries is not None and backend.sparse_cache is not None
        self.decode = decode
        self.backend = backend
        self.summaries = backend.summaries
        self.cache = backend.sparse_cache
        self.storage = backend.storage
        self.scale = scale
        self.budget_blocks = backend.sparse_budget_blocks
        device = self.storage.device
        max_blocks = self.cache.slot_of.shape[-1]
        self.max_capacity = -(-max_blocks // CAPACITY_STEP_BLOCKS) * CAPACITY_STEP_BLOCKS
        # static cold inputs: [0] ids in the cpu tier, [1] logical block numbers (padding: 0),
        # [2, 0] the number of real blocks, [2, 1] the sequence's step row; pinned host twins in
        # turn, like DecodeGraphs' (async scheduling may still copy from the other set)
        self.i64 = torch.zeros((3, self.max_capacity), dtype=torch.int64, device=device)
        self.host_sets = HostSets(
            [(torch.zeros_like(self.i64, device="cpu").pin_memory(),) for _ in range(2)]
        )
        self.tiers = torch.full((self.max_capacity,), TIER_CPU, dtype=torch.int64, device=device)
        self.positions = torch.arange(self.max_capacity, device=device)
        self.entries: OrderedDict[tuple[int, int, int], _Entry] = OrderedDict()
        self.num_replays = 0
        self.num_captures = 0
        self._logged: set[str] = set()  # eager_reason()s already logged
        self.off = False  # a capture failed: every step runs eagerly

    def run(self, inputs: StepInputs, feed: DeviceFeed | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(logits, greedy ids) of the sampled rows, like `DecodeGraphs.run`; None: run eagerly."""
        seq = None if self.off else self._eligible(inputs)
        if seq is None:
            return None
        (group,) = self.cache.assign([seq.req_id])
        if group is None:
            return None
        num_cold = len(seq.block_ids)
        capacity = -(-num_cold // CAPACITY_STEP_BLOCKS) * CAPACITY_STEP_BLOCKS
        if capacity > self.max_capacity:  # not with the engine's max_seq_blocks; kept as a guard
            return None
        bucket = self.decode.fill_inputs(inputs, inputs.gpu_seq_lens, feed)
        if bucket is None:
            return None
        ids = seq.block_ids.astype(np.int64)
        assert seq.block_index is not None  # checked by _eligible
        if not self.summaries.valid[TIER_CPU][ids].all():
            self.backend.wait_host()
            self.summaries.ensure(TIER_CPU, ids)
        self._fill_cold(ids, seq.block_index, seq.token_start)
        key = (bucket, capacity, group)
        entry = self.entries.get(key)
        if entry is None:
            try:
                entry = self._capture(key)
            except Exception as e:  # a configuration the capture cannot take must not fail requests
                logger.warning(
                    "sparse decode CUDA graphs are off for this engine: a capture failed (%s: %s); "
                    "sparse decode steps run eagerly",
                    type(e).__name__,
                    e,
                )
                self.off = True
                return None  # the runner runs this step eagerly (the warm-up's writes are idempotent)
        else:
            self.entries.move_to_end(key)
            entry.graph.replay()
        self.num_replays += 1
        self._count(num_cold)
        copy_stream = self.storage.copy_stream
        if copy_stream is not None:
            copy_stream.wait_stream(torch.cuda.current_stream(self.storage.device))
        return self.decode.sampled_rows(inputs, entry.logits, entry.greedy_ids)

    def _eligible(self, inputs: StepInputs) -> ColdSeq | None:
        """The step's one cold sequence when the graphs can run the step, else None (logged once
        per reason: an eager sparse step is 2-3x slower, H200 W3 128K)."""
        reason = eager_reason(inputs, self.budget_blocks)
        if reason is None:
            return inputs.cold_seqs[0]
        if reason not in self._logged:
            self._logged.add(reason)
            logger.info("sparse decode steps run without CUDA graphs while %s", reason)
        return None

    def _fill_cold(self, ids: np.ndarray, logical: np.ndarray, row: int) -> None:
        n = len(ids)
        (host,) = self.host_sets.take()
        h = host.numpy()
        h[0, :n] = ids
        h[1, :n] = logical
        h[2, :2] = (n, row)
        for i in range(3):  # rows of the pinned buffer: contiguous copies, no staging
            self.i64[i, : n if i < 2 else 2].copy_(host[i, : n if i < 2 else 2], non_blocking=True)
        self.host_sets.queued()

    def _capture(self, key: tuple[int, int, int]) -> _Entry:
        bucket, capacity, group = key
        while len(self.entries) >= MAX_GRAPHS:
            _, old = self.entries.popitem(last=False)
            torch.cuda.synchronize(self.storage.device)
            old.graph.reset()
        cold = graph_cold_step(
            self.backend, self.i64, self.tiers, self.positions, capacity, group, self.scale
        )
        with torch.inference_mode():
            graph, (logits, greedy_ids) = self.decode.capture_one(bucket, cold)
        graph.replay()  # the capture only recorded: this step's result
        self.num_captures += 1
        logger.info("captured a sparse decode CUDA graph: batch %d, %d cold blocks, cache group %d", *key)
        entry = _Entry(graph, logits, greedy_ids, cold)
        self.entries[key] = entry
        return entry

    def _count(self, num_cold: int) -> None:
        """What the eager path's per-layer counters would add for this step."""
        stats = self.backend.stats
        layers = self.storage.layout.num_layers
        stats.num_steps += 1
        stats.sparse.selected_blocks += self.budget_blocks * layers
        stats.sparse.cold_blocks += num_cold * layers

    def release(self) -> None:
        torch.cuda.synchronize(self.storage.device)
        for entry in self.entries.values():
            entry.graph.reset()
        self.entries.clear()
