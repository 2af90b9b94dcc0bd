"""The stream path of one decode sequence in the form a CUDA graph can replay (`runner/stream_graphs.py`).

The eager stream path (`cold_stream.py`) plans its chunks on the host each step: which blocks,
how many, which staging buffer. A graph fixes all of that at capture, so here the sequence's
cold block ids lie in a static device buffer padded to a *capacity* (a multiple of the staging
buffer's `chunk_blocks`), and the count of real ones (`num_valid`) is a device scalar. Per layer
and chunk c:
  1. the zero-copy gather kernel copies the chunk's real blocks from the pinned cpu pool into the
     staging buffer; padding gets slot -1 and copies nothing (no PCIe bytes for padding);
  2. the decode kernel attends the staging buffer with `seq_len = real blocks * block_size`, read
     on the device (a chunk past the end has seq_len 0: o = 0, lse = -inf, "no keys");
  3. the partial merges by LSE into the step's cold accumulator.
As in the eager path the copies run on a second stream into two staging buffers in turn, so the
gather of item i + 1 (the next chunk, or the next layer's first) overlaps the kernel of item i;
events order each buffer's gather before its reads and its reads before the next gather into it.
All of a step's events are recorded within the step (fresh events), so a capture holds them.
What the graph saves is the host's launch work, which bounded steps with a small cold part (fp8
KV at 128K on an H200: 54-90 ms per step for ~41 ms of GPU kernels). The overlap needs a gather
that leaves SMs free (`kernels/uva_gather.py`): with one that filled them it gained nothing.

Invariant: the result equals the eager stream path's over the same blocks up to float rounding
(the same kernels, over chunks cut at other places).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from kvspill.attention.cold.merge import merge_rows_into
from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.uva_gather import gather_blocks_to
from kvspill.storage.storage import TieredKVStorage
from kvspill.types import TIER_CPU


class GraphStreamPart:
    """Streams one sequence's cold blocks (all in the pinned cpu tier) chunk by chunk, each layer."""

    def __init__(
        self,
        storage: TieredKVStorage,
        staging: list[torch.Tensor],  # 2 x [chunk_blocks, ...] (device): `KVLayout.staging_shape`
        ids: torch.Tensor,  # [capacity] int64 ids in the cpu tier (device); past num_valid: any id
        num_valid: torch.Tensor,  # int64 scalar (device): how many of `ids` are real
    ) -> None:
        chunk = staging[0].shape[0]
        capacity = ids.shape[0]
        assert len(staging) == 2 and capacity % chunk == 0, (
            f"two staging buffers, capacity {capacity} a multiple of the chunk ({chunk} blocks)"
        )
        device = staging[0].device
        self.storage = storage
        self.staging = staging
        self.ids = ids
        self.num_valid = num_valid
        self.chunk = chunk
        self.num_chunks = capacity // chunk
        self.num_items = storage.layout.num_layers * self.num_chunks
        self.local = torch.arange(chunk, device=device)  # slot of each block within a chunk
        self.starts = torch.arange(self.num_chunks, device=device) * chunk
        self.table = torch.arange(chunk, dtype=torch.int32, device=device)[None]  # [1, chunk]
        self.row = torch.zeros(1, dtype=torch.int64, device=device)  # the one cold row
        self.is_cuda = device.type == "cuda"
        self._decode = paged_decode_attention if self.is_cuda else paged_decode_attention_ref
        self.side = torch.cuda.Stream(device) if self.is_cuda else None
        # Per step, written at layer 0 (a replay recomputes them from its num_valid): per chunk its
        # real blocks' slots (-1: padding, copies nothing) and its length in keys. Long-lived
        # buffers: the side stream reads them, so no tensor's memory passes between the streams.
        self.slots = torch.empty((self.num_chunks, chunk), dtype=torch.int64, device=device)
        self.seq_lens = torch.empty(self.num_chunks, dtype=torch.int32, device=device)
        # per step: when the buffers above were written, the events of the item last loaded into
        # / last read from each staging buffer
        self._counted: torch.cuda.Event | None = None
        self._loaded: list[torch.cuda.Event | None] = [None, None]
        self._free: list[torch.cuda.Event | None] = [None, None]

    def attend(
        self, layer_idx: int, q_cold: torch.Tensor, scale: float, acc_o: torch.Tensor, acc_lse: torch.Tensor
    ) -> None:
        """q_cold: [1, num_heads, head_dim]; merges this layer's cold (o, lse) into acc."""
        if layer_idx == 0:
            counts = (self.num_valid - self.starts).clamp(0, self.chunk)  # real blocks per chunk
            self.slots.copy_(torch.where(self.local[None] < counts[:, None], self.local[None], -1))
            self.seq_lens.copy_(counts * self.storage.layout.block_size)
            self._counted = self._record()
            self._free = [None, None]  # a new step: the last one's reads finished before it began
            self._load(0)
        for c in range(self.num_chunks):
            item = layer_idx * self.num_chunks + c
            buf = item % 2
            self._wait(self._loaded[buf])
            kv_layer = self.storage.layout.staged_layer(self.staging[buf], layer_idx)
            o, lse = self._decode(q_cold, kv_layer, self.table, self.seq_lens[c : c + 1], scale)
            self._free[buf] = self._record()
            if item + 1 < self.num_items:
                self._load(item + 1)  # the next chunk, or the next layer's first, meanwhile
            merge_rows_into(acc_o, acc_lse, self.row, o.float(), lse)

    def _load(self, item: int) -> None:
        """Gather item's blocks into buffer item % 2 on the side stream, after the last read of that
        buffer and the step's slots; the compute stream waits for `_loaded` before reading it."""
        layer_idx, c = divmod(item, self.num_chunks)
        buf = item % 2
        src = self.storage.tier_layer(TIER_CPU, layer_idx)
        ids = self.ids[c * self.chunk : (c + 1) * self.chunk]
        with _on(self.side):
            for event in (self._free[buf], self._counted):
                if event is not None and self.side is not None:
                    self.side.wait_event(event)
            gather_blocks_to(
                src, ids, self.slots[c], self.storage.layout.staged_layer(self.staging[buf], layer_idx)
            )
            self._loaded[buf] = self._record()

    def _record(self) -> torch.cuda.Event | None:
        if not self.is_cuda:
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def _wait(self, event: torch.cuda.Event | None) -> None:
        if event is not None:
            torch.cuda.current_stream(self.staging[0].device).wait_event(event)


def _on(stream: torch.cuda.Stream | None) -> AbstractContextManager[object]:
    return torch.cuda.stream(stream) if stream is not None else nullcontext()
