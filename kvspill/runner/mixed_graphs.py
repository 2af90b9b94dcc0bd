"""CUDA graphs for mixed steps: a few decode rows beside a prefill chunk of at most `chunk` tokens
(of one or two prompts), the steps the engine builds while requests decode and prompts arrive.

Why: such a step ran eagerly, eleven kernels per layer launched from Python: on an H200 a 3B's
mixed step with a 256-token chunk took 17-20 ms for about 5 ms of GPU work, and an 8B's 45-52 ms,
so every decoding request's inter-token latency was 4-6x its decode step, whatever the chunk size
(bench/results/2026-12-02-h200-mixed-graphs/). Replayed from a graph, the step costs its GPU time:
ITL p99 within 2.1x p50 at 1-64 sequences on the same card.

On by default (KVSPILL_MIXED_CUDA_GRAPHS=0 runs mixed steps eagerly). The GPU test compares every
replayed step's logits with the eager step's (bench/results/2026-12-02-h200-mixed-graphs-default/).
The reference step runs before the replay: under async scheduling a DeviceFeed's source is the
previous step's sampled ids, a view of a graph output that the replay rewrites.

Static rows, in this order: [0, b) the decode rows (padding rows: slot -1 stores nothing, seq_len 0
attends to nothing), [b, b + chunk) the prefill tokens in step order, then padding (id 0,
position 0, slot -1). The prefill kernel's grid is sized for `chunk` queries of MIXED_GRAPH_PREFILLS
sequences; its tiles past a sequence's length return at once, and an absent sequence has no
queries. The logits rows are the b decode rows and each prefill's last token (the rows a step
may sample), so the lm_head reads b + MIXED_GRAPH_PREFILLS rows. Padding rows' outputs are never read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kvspill.model.base import CausalLM
from kvspill.plan.choices import MIXED_GRAPH_PREFILLS, mixed_buckets
from kvspill.runner.async_output import DeviceFeed
from kvspill.runner.attention import AttentionMetadata, PagedAttention
from kvspill.runner.cuda_graphs import DecodeGraphs, HostSets, capture_graph, reset_graphs
from kvspill.runner.inputs import StepInputs
from kvspill.sampling.sampler import widen_and_greedy
from kvspill.storage.storage import KVStorage

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MixedShape:
    """The static sizes of one set of mixed graphs."""

    max_decodes: int  # the largest decode bucket
    chunk: int  # prefill tokens per step, at most
    max_blocks: int  # block-table width

    @property
    def rows(self) -> int:
        return self.max_decodes + self.chunk

    @property
    def i32_size(self) -> int:
        """decode seq_lens | decode tables | prefill query starts | prefill seq_lens | prefill tables."""
        return (
            self.max_decodes * (1 + self.max_blocks)
            + (MIXED_GRAPH_PREFILLS + 1)
            + MIXED_GRAPH_PREFILLS * (1 + self.max_blocks)
        )


def mixed_fits(inputs: StepInputs, shape: MixedShape) -> bool:
    """Whether a step has the graphs' form: 1..max_decodes decodes, 1..MIXED_GRAPH_PREFILLS prefill chunks
    of `chunk` tokens in all, no cold blocks, block tables no wider than the graphs'."""
    nd = inputs.num_decodes
    prefills = len(inputs.req_ids) - nd
    return (
        0 < nd <= shape.max_decodes
        and 0 < prefills <= MIXED_GRAPH_PREFILLS
        and inputs.num_tokens - nd <= shape.chunk
        and inputs.block_tables.shape[1] <= shape.max_blocks
        and not inputs.cold_seqs
    )


def fill_mixed_rows(
    inputs: StepInputs, bucket: int, shape: MixedShape, i64: np.ndarray, i32: np.ndarray
) -> None:
    """Write the step into host buffers `i64` [4, rows] (ids, positions, slots, logits rows) and
    `i32` [i32_size] in the graphs' layout (module doc) for decode bucket `bucket`."""
    nd, n_tok, w = inputs.num_decodes, inputs.num_tokens, inputs.block_tables.shape[1]
    c = n_tok - nd
    ids, pos, slots, rows = i64
    ids[:nd], pos[:nd], slots[:nd] = inputs.input_ids[:nd], inputs.positions[:nd], inputs.slot_mapping[:nd]
    ids[nd:bucket], pos[nd:bucket], slots[nd:bucket] = 0, 0, -1
    end = bucket + c
    ids[bucket:end], pos[bucket:end], slots[bucket:end] = (
        inputs.input_ids[nd:],
        inputs.positions[nd:],
        inputs.slot_mapping[nd:],
    )
    ids[end : shape.rows], pos[end : shape.rows], slots[end : shape.rows] = 0, 0, -1
    dec_lens, dec_tables, qsl, pre_lens, pre_tables = _i32_views(i32, shape)
    dec_lens[:nd], dec_lens[nd:bucket] = inputs.gpu_seq_lens[:nd], 0
    dec_tables[:nd, :w] = inputs.block_tables[:nd]
    qsl_step = inputs.query_start_loc[nd:] - inputs.query_start_loc[nd]
    prefills = len(qsl_step) - 1
    qsl[: prefills + 1], qsl[prefills + 1 :] = qsl_step, qsl_step[-1]
    pre_lens[:prefills], pre_lens[prefills:] = inputs.gpu_seq_lens[nd:], 0
    pre_tables[:prefills, :w] = inputs.block_tables[nd:]
    rows[:nd], rows[nd:bucket] = np.arange(nd), 0
    rows[bucket : bucket + MIXED_GRAPH_PREFILLS] = bucket + np.maximum(qsl[1:] - 1, 0)


def _i32_views(i32: Any, shape: MixedShape) -> tuple[Any, Any, Any, Any, Any]:
    """(decode seq_lens, decode tables, prefill query starts, prefill seq_lens, prefill tables) of `i32`."""
    m, mb, p = shape.max_decodes, shape.max_blocks, MIXED_GRAPH_PREFILLS
    o1 = m
    o2 = o1 + m * mb
    o3 = o2 + p + 1
    o4 = o3 + p
    return i32[:o1], i32[o1:o2].reshape(m, mb), i32[o2:o3], i32[o3:o4], i32[o4 : o4 + p * mb].reshape(p, mb)


def mixed_metadata(i64: torch.Tensor, i32: torch.Tensor, bucket: int, shape: MixedShape) -> AttentionMetadata:
    """The attention metadata over the static buffers for decode bucket `bucket`."""
    dec_lens, dec_tables, qsl, pre_lens, pre_tables = _i32_views(i32, shape)
    return AttentionMetadata(
        slot_mapping=i64[2, : bucket + shape.chunk],
        num_decodes=bucket,
        decode_block_tables=dec_tables[:bucket],
        decode_seq_lens=dec_lens[:bucket],
        prefill_block_tables=pre_tables,
        prefill_query_start_loc=qsl,
        prefill_seq_lens=pre_lens,
        prefill_max_query_len=shape.chunk,
    )


def run_mixed_model(
    model: CausalLM,
    storage: KVStorage,
    scale: float,
    buffers: tuple[torch.Tensor, torch.Tensor],
    bucket: int,
    shape: MixedShape,
    counters: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [bucket + MIXED_GRAPH_PREFILLS, vocab], their argmax) over the static `buffers` (i64, i32):
    what a capture records. `counters`: the argmax kernel's (int32, 0 between steps)."""
    i64, i32 = buffers
    n = bucket + shape.chunk
    attention = PagedAttention(storage, mixed_metadata(i64, i32, bucket, shape), scale)
    hidden = model(i64[0, :n], i64[1, :n], attention)
    sampled = hidden.index_select(0, i64[3, : bucket + MIXED_GRAPH_PREFILLS])
    logits = model.compute_logits(sampled, widen=False)
    return widen_and_greedy(logits, counters)


def mixed_sample_index(inputs: StepInputs, bucket: int) -> list[int]:
    """The logits rows of the sequences that sample, in `inputs.sample_rows` order."""
    nd = inputs.num_decodes
    return [i if i < nd else bucket + (i - nd) for i in inputs.sample_rows]


class MixedGraphs:
    """One graph per decode bucket up to `max_decodes`, sharing the decode graphs' memory pool."""

    def __init__(self, decode: DecodeGraphs, chunk: int, max_decodes: int) -> None:
        self.model, self.storage, self.scale = decode.model, decode.storage, decode.scale
        self.buckets = mixed_buckets(decode.buckets, max_decodes)
        self.shape = MixedShape(self.buckets[-1], chunk, decode.max_blocks_per_seq)
        dev = self.storage.device
        self.i64 = torch.zeros((4, self.shape.rows), dtype=torch.int64, device=dev)
        self.i32 = torch.zeros(self.shape.i32_size, dtype=torch.int32, device=dev)
        self.argmax_counters = torch.zeros(self.shape.rows, dtype=torch.int32, device=dev)  # 0 between steps
        self.host_sets = HostSets.pinned_twins(self.i64, self.i32)
        self.pool, self.capture_stream = decode.pool, decode.capture_stream
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @torch.inference_mode()
    def capture(self) -> None:
        self.i64[2].fill_(-1)  # padding only: nothing stored, nothing attended
        for host_i64, _ in self.host_sets.sets:
            host_i64[2].fill_(-1)
        for b in reversed(self.buckets):
            self.graphs[b], self.outputs[b] = self._capture_one(b)
        torch.cuda.synchronize()
        logger.info(
            "captured mixed-step CUDA graphs for %d-token chunks beside %s decodes",
            self.shape.chunk,
            self.buckets,
        )

    def _capture_one(self, b: int) -> tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]:
        def run() -> tuple[torch.Tensor, torch.Tensor]:
            buffers = (self.i64, self.i32)
            return run_mixed_model(
                self.model, self.storage, self.scale, buffers, b, self.shape, self.argmax_counters
            )

        return capture_graph(run, self.pool, self.capture_stream)

    def release(self) -> None:
        reset_graphs(self.graphs)
        self.outputs.clear()

    def run(
        self, inputs: StepInputs, feed: DeviceFeed | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(logits, greedy ids) of the sampling rows of a mixed step, or None when it has another form."""
        if not self.graphs or not mixed_fits(inputs, self.shape):
            return None
        bucket = next(b for b in self.buckets if b >= inputs.num_decodes)
        host_i64, host_i32 = self.host_sets.take()
        fill_mixed_rows(inputs, bucket, self.shape, host_i64.numpy(), host_i32.numpy())
        self.i64.copy_(host_i64, non_blocking=True)
        self.i32.copy_(host_i32, non_blocking=True)
        self.host_sets.queued()
        if feed is not None:  # in-flight ids are decode rows: the same row numbers here
            feed.apply(self.i64[0])
        self.graphs[bucket].replay()
        logits, greedy = self.outputs[bucket]
        index = mixed_sample_index(inputs, bucket)
        if index == list(range(len(index))):
            return logits[: len(index)], greedy[: len(index)]
        rows = torch.as_tensor(index, dtype=torch.long)
        if logits.is_cuda:  # pinned: the copy stays asynchronous (a CPU test replays without CUDA)
            rows = rows.pin_memory().to(logits.device, non_blocking=True)
        return logits.index_select(0, rows), greedy.index_select(0, rows)
