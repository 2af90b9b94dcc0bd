"""CUDA graphs of exact decode steps whose cold blocks stream to the GPU (`--cold-attention
stream`, `auto` on CUDA, and `split` steps that give the CPU no share), on
`cold_graphs.ColdDecodeGraphs`.

An eager stream step launches per layer the gathers, decode kernels and merges of each staging
chunk from Python. With a small cold part that host work bounds the step: fp8 KV at 128K on an
H200 (19K cold tokens) took 54-90 ms per token for ~41 ms of GPU kernels. The graph's cold part is
`attention/cold/stream_graph.GraphStreamPart`: the cold block ids in a static buffer padded to a
multiple of the staging buffer's `chunk_blocks` (the capacity step: 16K tokens with the default
16-token blocks), the real count on the device.

Steps that do not fit (prefill chunks, several cold sequences, disk blocks, an unpinned cpu pool,
a split step that hands the CPU a share) run eagerly as before, each reason logged once.
"""

from __future__ import annotations

import torch

from kvspill.attention.cold.dispatch import ColdAttentionBackend, ColdStep
from kvspill.attention.cold.stream_graph import GraphStreamPart
from kvspill.runner.cold_graphs import ColdDecodeGraphs, common_eager_reason
from kvspill.runner.cuda_graphs import DecodeGraphs
from kvspill.runner.inputs import StepInputs


def stream_eager_reason(inputs: StepInputs, backend: ColdAttentionBackend) -> str | None:
    """Why a decode-only step with cold sequences cannot replay a stream graph (None: it can)."""
    reason = common_eager_reason(inputs)
    if reason is not None:
        return reason
    if backend.decode_cpu_fraction(inputs.cold_seqs, graphable=True) > 0:
        return "split gives the CPU a share of the cold blocks"
    return None


def graph_stream_step(
    backend: ColdAttentionBackend, i64: torch.Tensor, capacity: int, scale: float
) -> ColdStep:
    """The cold part of a stream graph over its static buffers: `i64` [3, >= capacity] int64 (ids
    in the cpu tier, unused, then [num_valid, step row]); staging: the backend's two stream buffers."""
    part = GraphStreamPart(backend.storage, backend.stager().device_bufs, i64[0, :capacity], i64[2, 0])
    return ColdStep.for_graph(backend, part, i64[2, 1:2], scale)


class StreamDecodeGraphs(ColdDecodeGraphs):
    """The graphs of stream decode steps of one runner (see the module docstring)."""

    kind = "stream"

    def __init__(self, decode: DecodeGraphs, backend: ColdAttentionBackend, scale: float) -> None:
        assert backend.summaries is None, "sparse decode steps have their own graphs"
        max_blocks = backend.config.max_seq_blocks or decode.max_blocks_per_seq
        super().__init__(decode, backend, scale, max_blocks, backend.stager().chunk_blocks)

    def reason(self, inputs: StepInputs) -> str | None:
        return stream_eager_reason(inputs, self.backend)

    def cold_step(self, capacity: int, group: int) -> ColdStep:
        return graph_stream_step(self.backend, self.i64, capacity, self.scale)

    def count(self, num_cold: int) -> None:
        stats = self.backend.stats
        stats.num_steps += 1
        stats.stream_graph_bytes += num_cold * self.storage.layout.block_bytes
