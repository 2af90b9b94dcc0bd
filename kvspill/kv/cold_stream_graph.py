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
Everything runs on the compute stream, in order: one staging buffer, no events. The eager path
overlaps each copy with the previous chunk's kernel on a second stream; here the copies and the
kernels take turns, and what the graph saves is the host's launch work, which bounded steps
with a small cold part (fp8 KV at 128K on an H200: 54-90 ms of host time for ~30 ms of GPU work).

Invariant: the result equals the eager stream path's over the same blocks up to float rounding
(the same kernels, over chunks cut at other places).
"""

from __future__ import annotations

import torch

from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.uva_gather import gather_blocks_to
from kvspill.kv.cold_math import merge_rows_into
from kvspill.kv.storage import TieredKVStorage
from kvspill.types import TIER_CPU


class GraphStreamPart:
    """Streams one sequence's cold blocks (all in the pinned cpu tier) chunk by chunk, each layer."""

    def __init__(
        self,
        storage: TieredKVStorage,
        staging: torch.Tensor,  # [chunk_blocks, 2, block_size, num_kv_heads, row_dim] on the device
        ids: torch.Tensor,  # [capacity] int64 ids in the cpu tier (device); past num_valid: any id
        num_valid: torch.Tensor,  # int64 scalar (device): how many of `ids` are real
    ) -> None:
        chunk = staging.shape[0]
        capacity = ids.shape[0]
        assert capacity % chunk == 0, f"capacity {capacity} is not a multiple of the chunk ({chunk} blocks)"
        device = staging.device
        self.storage = storage
        self.staging = staging
        self.ids = ids
        self.num_valid = num_valid
        self.chunk = chunk
        self.num_chunks = capacity // chunk
        self.local = torch.arange(chunk, device=device)  # slot of each block within a chunk
        self.starts = torch.arange(self.num_chunks, device=device) * chunk
        self.table = torch.arange(chunk, dtype=torch.int32, device=device)[None]  # [1, chunk]
        self.row = torch.zeros(1, dtype=torch.int64, device=device)  # the one cold row
        self._decode = paged_decode_attention if device.type == "cuda" else paged_decode_attention_ref

    def attend(
        self, layer_idx: int, q_cold: torch.Tensor, scale: float, acc_o: torch.Tensor, acc_lse: torch.Tensor
    ) -> None:
        """q_cold: [1, num_heads, head_dim]; merges this layer's cold (o, lse) into acc."""
        # per chunk: real blocks in it (0 past the end); computed per layer so that a replay
        # recomputes them from the step's num_valid
        counts = (self.num_valid - self.starts).clamp(0, self.chunk)
        seq_lens = (counts * self.storage.layout.block_size).to(torch.int32)
        src = self.storage.tier_layer(TIER_CPU, layer_idx)
        for c in range(self.num_chunks):
            slots = torch.where(self.local < counts[c], self.local, -1)
            gather_blocks_to(src, self.ids[c * self.chunk : (c + 1) * self.chunk], slots, self.staging)
            o, lse = self._decode(q_cold, self.staging, self.table, seq_lens[c : c + 1], scale)
            merge_rows_into(acc_o, acc_lse, self.row, o.float(), lse)
