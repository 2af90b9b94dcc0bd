"""CUDA graphs of decode steps with one cold sequence: what sparse (`sparse_graphs.py`) and
stream (`stream_graphs.py`) decode graphs share.

An eager decode step over cold KV launches every layer's cold work from Python (per layer: the
gathers, the decode kernels, the merges, and for sparse the scoring and selection). With a small
cold part the host's launching bounds the step; where every index of the cold path stays on the
device, the whole step can replay as one graph.

What a graph fixes and what changes per step:
- The batch bucket and the decode inputs: `DecodeGraphs`' static buffers (the gpu-tier part of
  each sequence: compacted block table, `gpu_seq_lens`).
- One sequence with cold blocks, all in the pinned cpu tier. Its cold block list (ids in the cpu
  tier and logical numbers) is padded to a *capacity* (a multiple of `capacity_step` blocks);
  `num_valid` says how many are real. Its step row is static too (`i64`, below).
- A graph per (bucket, capacity, group), captured the first time a step needs it: the capture
  runs that step once eagerly through the static buffers, records it, and replays it. A sequence
  grows one cold block every `block_size` tokens, so a new capacity comes every
  `capacity_step * block_size` tokens. At most `MAX_GRAPHS` are kept (least recently used first
  out). A subclass says which steps qualify (`reason`), builds the cold step over the static
  buffers (`cold_step`) and counts what a replay did (`count`).

Tensor parallelism does not use these graphs (every rank would have to capture at the same step).

Ordering: eager steps copy cold blocks on the storage's copy stream, and host writes into the
pinned pool wait for that stream (`storage/transfer.py`). A replay copies on the compute stream: before
it the compute stream waits for the copy stream, after it the copy stream waits for the compute
stream, so eager copies and host writes stay ordered with the replay's reads and writes.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.attention.cold.config import ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend, ColdStep
from kvspill.runner.async_output import DeviceFeed
from kvspill.runner.cuda_graphs import DecodeGraphs, HostSets
from kvspill.runner.inputs import StepInputs
from kvspill.types import TIER_CPU

logger = logging.getLogger(__name__)

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


def common_eager_reason(inputs: StepInputs) -> str | None:
    """Why a decode-only step with cold sequences cannot replay any cold graph (None: it may)."""
    if inputs.num_decodes != len(inputs.req_ids):
        return "a step carries prefill chunks"
    if len(inputs.cold_seqs) != 1:
        return "several sequences have cold blocks (graphs take one)"
    if not bool((inputs.cold_seqs[0].block_tiers == TIER_CPU).all()):
        return "a sequence has blocks in the disk tier (graphs take cpu-tier blocks)"
    return None


class ColdDecodeGraphs(ABC):
    """The graphs of one kind of cold decode step of one runner (see the module docstring)."""

    kind = "cold"  # names the kind in logs

    def __init__(
        self,
        decode: DecodeGraphs,
        backend: ColdAttentionBackend,
        scale: float,
        max_blocks: int,
        capacity_step: int,
    ) -> None:
        self.decode = decode
        self.backend = backend
        self.storage = backend.storage
        self.scale = scale
        self.capacity_step = capacity_step
        device = self.storage.device
        self.max_capacity = -(-max_blocks // capacity_step) * capacity_step
        # static cold inputs: [0] ids in the cpu tier, [1] logical block numbers (padding: 0),
        # [2, 0] the number of real blocks, [2, 1] the sequence's step row; pinned host twins in
        # turn, like DecodeGraphs' (async scheduling may still copy from the other set)
        self.i64 = torch.zeros((3, self.max_capacity), dtype=torch.int64, device=device)
        self.host_sets = HostSets.pinned_twins(self.i64)
        self.entries: OrderedDict[tuple[int, int, int], _Entry] = OrderedDict()
        self.num_replays = 0
        self.num_captures = 0
        self._logged: set[str] = set()  # reasons already logged
        self.off = False  # a capture failed: every step runs eagerly

    # ---- what a kind defines ---------------------------------------------------------------

    @abstractmethod
    def reason(self, inputs: StepInputs) -> str | None:
        """Why this step cannot replay this kind's graphs (None: it can); starts from
        `common_eager_reason`."""

    def group(self, seq: ColdSeq) -> int | None:
        """The sequence's group in a per-sequence cache (part of the graph's key); None: eager."""
        return 0

    def prepare(self, seq: ColdSeq) -> None:
        """Host work before the step's inputs go up (sparse: block summaries); none by default."""
        return None

    @abstractmethod
    def cold_step(self, capacity: int, group: int) -> ColdStep:
        """The cold part of a graph over the static buffers (`i64`) for this capacity and group."""

    @abstractmethod
    def count(self, num_cold: int) -> None:
        """What the eager path's per-layer counters would add for this step."""

    # ---- shared ----------------------------------------------------------------------------

    def run(self, inputs: StepInputs, feed: DeviceFeed | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(logits, greedy ids) of the sampled rows, like `DecodeGraphs.run`; None: run eagerly."""
        seq = None if self.off else self._eligible(inputs)
        if seq is None:
            return None
        group = self.group(seq)
        if group is None:
            return None
        num_cold = len(seq.block_ids)
        capacity = -(-num_cold // self.capacity_step) * self.capacity_step
        if capacity > self.max_capacity:  # not with the engine's max_seq_blocks; kept as a guard
            return None
        bucket = self.decode.fill_inputs(inputs, inputs.gpu_seq_lens, feed)
        if bucket is None:
            return None
        self.prepare(seq)
        logical = seq.block_index if seq.block_index is not None else np.zeros(num_cold, dtype=np.int64)
        self._fill_cold(seq.block_ids.astype(np.int64), logical, seq.token_start)
        compute = torch.cuda.current_stream(self.storage.device)
        copy_stream = self.storage.copy_stream
        if copy_stream is not None:
            compute.wait_stream(copy_stream)
        key = (bucket, capacity, group)
        entry = self.entries.get(key)
        if entry is None:
            try:
                entry = self._capture(key)
            except Exception as e:  # a configuration the capture cannot take must not fail requests
                logger.warning(
                    "%s decode CUDA graphs are off for this engine: a capture failed (%s: %s); "
                    "%s decode steps run eagerly",
                    self.kind,
                    type(e).__name__,
                    e,
                    self.kind,
                )
                self.off = True
                return None  # the runner runs this step eagerly (the warm-up's writes are idempotent)
        else:
            self.entries.move_to_end(key)
            entry.graph.replay()
        self.num_replays += 1
        self.count(num_cold)
        if copy_stream is not None:
            copy_stream.wait_stream(compute)
        return self.decode.sampled_rows(inputs, entry.logits, entry.greedy_ids)

    def _eligible(self, inputs: StepInputs) -> ColdSeq | None:
        """The step's one cold sequence when the graphs can run the step, else None (logged once
        per reason)."""
        reason = self.reason(inputs)
        if reason is None:
            return inputs.cold_seqs[0]
        if reason not in self._logged:
            self._logged.add(reason)
            logger.info("%s decode steps run without CUDA graphs while %s", self.kind, reason)
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
        cold = self.cold_step(capacity, group)
        with torch.inference_mode():
            graph, (logits, greedy_ids) = self.decode.capture_one(bucket, cold)
        graph.replay()  # the capture only recorded: this step's result
        self.num_captures += 1
        logger.info("captured a %s decode CUDA graph: batch %d, %d cold blocks, group %d", self.kind, *key)
        entry = _Entry(graph, logits, greedy_ids, cold)
        self.entries[key] = entry
        return entry

    def release(self) -> None:
        torch.cuda.synchronize(self.storage.device)
        for entry in self.entries.values():
            entry.graph.reset()
        self.entries.clear()
