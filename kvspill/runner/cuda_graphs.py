"""CUDA graphs for decode-only steps, one per batch-size bucket.

A decode step of a small model is hundreds of short kernels; replaying a captured graph removes
the per-launch CPU cost. Each bucket owns nothing but views of one set of static input buffers
sized for the largest bucket; a step of B sequences runs the smallest bucket >= B with padding
rows (slot -1: not stored; seq_len 0: attends to nothing). The decode kernel's split count is
fixed per bucket at capture (from the block table's width, no device sync); the kernel spreads
each sequence's actual length over those splits. The graph also computes the rows' greedy argmax
(used when every row samples greedily without penalties: no sampling kernels outside the graph).

With async scheduling the host fills step N+1's inputs while the GPU may still run step N, so the
pinned host buffers alternate between two sets (`HostSets`), and a set is rewritten only once
the copies queued from it have run. The engine's wait for each step's sampled tokens usually
guarantees that already, but steps that sample nothing (one-token prefill chunks, which are
decode-shaped and replay these graphs) are never waited for: with `--max-num-batched-tokens 1`
the host ran ahead, rewrote a set whose copy was still queued, and a step read the next step's
placeholder ids (a device-side assert in the embedding, H100/H200 2026-11-26/27). Input ids still
on the device (`DeviceFeed`) are written into the static buffer after the upload.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import torch

from kvspill.attention.cold.dispatch import ColdStep
from kvspill.model.base import CausalLM
from kvspill.plan.choices import batch_buckets
from kvspill.runner.async_output import DeviceFeed
from kvspill.runner.attention import AttentionMetadata, PagedAttention
from kvspill.runner.inputs import StepInputs
from kvspill.sampling.sampler import widen_and_greedy
from kvspill.storage.storage import KVStorage

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

logger = logging.getLogger(__name__)
_Out = TypeVar("_Out")


def reset_graphs(graphs: dict[int, torch.cuda.CUDAGraph]) -> None:
    """Destroy `graphs` once the device has run all they were asked to, and forget them."""
    torch.cuda.synchronize()
    for graph in graphs.values():
        graph.reset()
    graphs.clear()


class HostSets:
    """Two sets of pinned host buffers used in turn for async uploads: `take()` returns the next
    set once the copies last queued from it have run (an event wait, normally already passed);
    `queued()` marks the copies just enqueued from it."""

    def __init__(self, sets: list[tuple[torch.Tensor, ...]]) -> None:
        assert len(sets) == 2
        self.sets = sets
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._next = 0

    @classmethod
    def pinned_twins(cls, *device_buffers: torch.Tensor) -> HostSets:
        """Two sets of pinned host twins of `device_buffers` (same shapes and dtypes)."""
        return cls(
            [tuple(torch.zeros_like(b, device="cpu").pin_memory() for b in device_buffers) for _ in range(2)]
        )

    def take(self) -> tuple[torch.Tensor, ...]:
        event = self._events[self._next]
        if event is not None:
            event.synchronize()
        return self.sets[self._next]

    def queued(self) -> None:
        event = torch.cuda.Event()
        event.record()
        self._events[self._next] = event
        self._next ^= 1


def capture_graph(
    run: Callable[[], _Out], pool: _POOL_HANDLE, stream: torch.cuda.Stream
) -> tuple[torch.cuda.CUDAGraph, _Out]:
    """Run `run` once eagerly (Triton compilation, allocator warm-up: it really runs on the static
    inputs as they are), then capture it into the memory `pool`, on `stream`.

    Every graph of one pool is captured on the same stream: the caching allocator reuses a freed
    block only for the stream that allocated it, so graphs captured on fresh streams each kept their
    whole peak in the shared pool (9 decode and 5 mixed-step graphs of an 8B Q4_K: 914 MiB reserved,
    107 MiB in use; H200, 2026-12-02, bench/results/2026-12-02-h200-mixed-graphs/)."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
        # The eager run's temporaries stay cached in the default pool; the capture below
        # allocates its own in the graph pool, which the plan counts once (a GGUF lm_head
        # dequantized past 16 rows: 1 GiB for an 8B). Hand the cached copy back first.
        stream.synchronize()
        torch.cuda.empty_cache()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            out = run()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out


class DecodeGraphs:
    def __init__(
        self,
        model: CausalLM,
        storage: KVStorage,
        *,
        scale: float,
        max_num_seqs: int,
        max_blocks_per_seq: int,
    ) -> None:
        self.model = model
        self.storage = storage
        self.scale = scale
        self.buckets = batch_buckets(max_num_seqs)
        dev = storage.device
        n = self.buckets[-1]
        self.max_blocks_per_seq = max_blocks_per_seq
        # Two device buffers (int64: ids, positions, slots; int32: seq_lens, block tables) and
        # their pinned host twins: a step's inputs go up in three async copies, not five pageable ones.
        self.i64 = torch.zeros((3, n), dtype=torch.int64, device=dev)
        self.i32 = torch.zeros(n * (1 + max_blocks_per_seq), dtype=torch.int32, device=dev)
        self.host_sets = HostSets.pinned_twins(self.i64, self.i32)
        self.input_ids, self.positions, self.slot_mapping = self.i64[0], self.i64[1], self.i64[2]
        self.seq_lens = self.i32[:n]
        self.block_tables = self.i32[n:].view(n, max_blocks_per_seq)
        # widen_and_greedy's arrival counters: 0 between steps (the kernel sets them back)
        self.argmax_counters = torch.zeros(n, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.greedy_ids: dict[int, torch.Tensor] = {}
        self.pool = torch.cuda.graph_pool_handle()  # one memory pool shared by every graph
        self.capture_stream = torch.cuda.Stream()  # and one stream for every capture: capture_graph

    def run_model(self, b: int, cold: ColdStep | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The model over bucket `b`'s static inputs (eager; what a capture records)."""
        empty = torch.zeros(0, dtype=torch.int32, device=self.storage.device)
        meta = AttentionMetadata(
            slot_mapping=self.slot_mapping[:b],
            num_decodes=b,
            decode_block_tables=self.block_tables[:b],
            decode_seq_lens=self.seq_lens[:b],
            prefill_block_tables=empty.view(0, 1),
            prefill_query_start_loc=empty,
            prefill_seq_lens=empty,
            cold=cold,
        )
        attention = PagedAttention(self.storage, meta, self.scale)
        hidden = self.model(self.input_ids[:b], self.positions[:b], attention)
        return widen_and_greedy(self.model.compute_logits(hidden, widen=False), self.argmax_counters)

    @torch.inference_mode()
    def capture(self) -> None:
        # Padding rows only: slot -1 writes nothing, seq_len 0 reads nothing.
        self.seq_lens.zero_()
        self.slot_mapping.fill_(-1)
        for host_i64, _ in self.host_sets.sets:
            host_i64[2].fill_(-1)
        for b in reversed(self.buckets):  # largest first so smaller ones reuse its pool
            self.graphs[b], (self.logits[b], self.greedy_ids[b]) = self.capture_one(b)
        torch.cuda.synchronize()
        logger.info("captured decode CUDA graphs for batch sizes %s", self.buckets)

    def capture_one(
        self, b: int, cold: ColdStep | None = None
    ) -> tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]:
        """Capture bucket `b` (`capture_graph`: an eager run, then the capture, in the shared pool)."""
        return capture_graph(lambda: self.run_model(b, cold), self.pool, self.capture_stream)

    def release(self) -> None:
        """Destroy the captured graphs. Needed before a tensor-parallel rank leaves its NCCL group:
        a graph that captured a collective holds a reference on the communicator, and NCCL's
        teardown waits for it (the ranks hung in `destroy_process_group`, 2 and 4 H200s)."""
        reset_graphs(self.graphs)
        self.logits.clear()
        self.greedy_ids.clear()

    def run(
        self, inputs: StepInputs, feed: DeviceFeed | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(logits [num_sampled, vocab], their greedy argmax [num_sampled]) of a decode-only
        step, or None when no bucket fits. Both are views of the graph's buffers."""
        bucket = self.fill_inputs(inputs, inputs.seq_lens, feed)
        if bucket is None:
            return None
        self.graphs[bucket].replay()
        return self.sampled_rows(inputs, self.logits[bucket], self.greedy_ids[bucket])

    def bucket_for(self, inputs: StepInputs) -> int | None:
        """The smallest bucket that holds the step, None when none does."""
        bucket = next((b for b in self.buckets if b >= len(inputs.req_ids)), None)
        if bucket is None or inputs.block_tables.shape[1] > self.max_blocks_per_seq:
            return None
        return bucket

    def fill_inputs(self, inputs: StepInputs, seq_lens: np.ndarray, feed: DeviceFeed | None) -> int | None:
        """Write the step into the static input buffers (`seq_lens`: what the gpu kernels attend,
        the gpu-tier part for sequences with cold blocks); returns its bucket (None: no fit)."""
        bucket = self.bucket_for(inputs)
        if bucket is None:
            return None
        b_real = len(inputs.req_ids)
        host_i64, host_i32 = self.host_sets.take()
        n, w = self.buckets[-1], inputs.block_tables.shape[1]
        h64, h32 = host_i64.numpy(), host_i32.numpy()
        h64[0, :b_real] = inputs.input_ids
        h64[0, b_real:bucket] = 0  # padding rows: a valid id (a stale placeholder would index out of range)
        h64[1, :b_real] = inputs.positions
        h64[2, :b_real] = inputs.slot_mapping
        h64[2, b_real:bucket] = -1  # padding rows store nothing
        h32[:b_real] = seq_lens
        h32[b_real:bucket] = 0  # and attend to nothing
        tables = h32[n : n + bucket * self.max_blocks_per_seq].reshape(bucket, self.max_blocks_per_seq)
        tables[:b_real, :w] = inputs.block_tables
        self.i64.copy_(host_i64, non_blocking=True)  # [3, max bucket]: a few KB
        self.i32[:bucket].copy_(host_i32[:bucket], non_blocking=True)
        self.i32[n : n + bucket * self.max_blocks_per_seq].copy_(
            host_i32[n : n + bucket * self.max_blocks_per_seq], non_blocking=True
        )
        self.host_sets.queued()
        if feed is not None:
            feed.apply(self.input_ids)
        return bucket

    @staticmethod
    def sampled_rows(
        inputs: StepInputs, logits: torch.Tensor, greedy_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The graph outputs' rows of the sequences that sample this step."""
        b_real = len(inputs.req_ids)
        logits, greedy_ids = logits[:b_real], greedy_ids[:b_real]
        if len(inputs.sample_rows) != b_real:
            rows = torch.as_tensor(inputs.sample_rows, dtype=torch.long, device=logits.device)  # may be empty
            logits, greedy_ids = logits[rows], greedy_ids[rows]
        return logits, greedy_ids
