"""Cold path (b): stream cold blocks to the device in double-buffered chunks and attend there.

A step's cold blocks (per sequence, the share this path gets) are packed into chunks of at most
`chunk_blocks` distinct blocks (a block several sequences attend, a shared prefix, is loaded once
and read through each one's table); every layer walks the same chunks. For one (layer, chunk) item:
  1. cpu-tier blocks in pinned memory: a zero-copy gather kernel on the copy stream reads the
     chunk's blocks of that layer in place into the device staging buffer (`uva_gather.py`);
  2. disk-tier blocks (and cpu-tier ones when the pool is not pinned): a host gather (for disk
     blocks, file reads of that layer, one per run of consecutive ids: `DiskPool.read_layer`)
     into a contiguous pinned staging buffer, then one H2D copy of it on the copy stream;
  3. the split-KV decode kernel runs over the staging buffer with folded queries
     (`cold_math.fold_queries`: T tokens of a sequence as one query, no mask), and the partial
     is merged into the step's cold accumulator.
Item i uses buffer i % 2 and, once its kernel is enqueued, item i + 1 (the next chunk, or the
first chunk of the next layer) is loaded into the other buffer: copies overlap the kernels.
Device memory is 2 * chunk_blocks per-layer blocks whatever the context length.

Invariants (CUDA): the compute stream waits for buffer b's `loaded` event before reading it;
the copy stream waits for b's `free` event (recorded after the last kernel that read b) before
overwriting it; the host waits for b's previous H2D before gathering into host buffer b. Off
CUDA the host and device buffers are one tensor and every step is synchronous.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kvspill.attention.cold.merge import fold_queries, merge_rows_into, unfold_outputs
from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.uva_gather import gather_blocks
from kvspill.storage.storage import TieredKVStorage, allocate_host_pool
from kvspill.storage.transfer import EventTimer
from kvspill.types import TIER_CPU, TIER_DISK


@dataclass(frozen=True)
class ColdPart:
    """The cold blocks one path attends for one sequence; rows are the step's cold-row space."""

    row_start: int  # first of the sequence's rows in the cold-row space (see ColdStep.rows)
    row_end: int
    cpu_block_ids: np.ndarray  # [n_cpu] int64, ids in the cpu tier
    disk_block_ids: np.ndarray  # [n_disk] int64, ids in the disk tier

    @property
    def num_blocks(self) -> int:
        return len(self.cpu_block_ids) + len(self.disk_block_ids)


@dataclass
class StreamChunk:
    """One staging buffer's worth of blocks and the folded queries that attend them."""

    gathers: list[tuple[int, torch.Tensor, torch.Tensor, int]]  # (tier, host ids, device ids, staging offset)
    num_blocks: int
    tokens_per_query: int  # T: query tokens folded into one kernel query
    # [num_queries, max_piece_blocks] int32 staging ids (device); one sequence's chunk is one row
    # expanded (stride 0): a 512K prefill step's tables were 2 MB per chunk, 32 chunks per step
    block_tables: torch.Tensor
    seq_lens: torch.Tensor  # [num_queries] int32 (device)
    q_rows: torch.Tensor  # [num_queries * T] int64 cold rows; padding repeats a real row (device)
    valid: torch.Tensor  # [num_valid] int64 positions of real rows in q_rows (device)
    target: torch.Tensor  # [num_valid] int64 cold rows of those positions (device)


def plan_chunks(
    parts: list[ColdPart], chunk_blocks: int, block_size: int, group: int, max_rows: int, device: torch.device
) -> list[StreamChunk]:
    """Pack the parts' distinct blocks into chunks of `chunk_blocks` (in order of first use, each
    part's cpu blocks then its disk blocks), so a block that several sequences attend (a shared
    prefix: concurrent requests on the same repository) is loaded once per layer and step, and
    every sequence with blocks in a chunk reads them through its own table row. A sequence
    appears at most once per chunk, so its accumulator rows are distinct per merge. Vectorized:
    a 128K-token sequence has 8K cold blocks, planned every step."""
    # one int64 per block: id * 2 + (1 for the disk tier)
    codes = [np.concatenate([p.cpu_block_ids * 2, p.disk_block_ids * 2 + 1]).astype(np.int64) for p in parts]
    all_codes = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
    uniq, first, inverse = np.unique(all_codes, return_index=True, return_inverse=True)
    by_first_use = np.argsort(first, kind="stable")
    slot_of_uniq = np.empty(len(uniq), dtype=np.int64)
    slot_of_uniq[by_first_use] = np.arange(len(uniq))
    slots = slot_of_uniq[inverse.reshape(-1)]
    blocks = uniq[by_first_use]  # codes in slot order
    num_chunks = -(-len(uniq) // chunk_blocks)
    # per chunk: (part, its blocks' slots in the chunk) for every part with blocks there
    pieces: list[list[tuple[ColdPart, np.ndarray]]] = [[] for _ in range(num_chunks)]
    start = 0
    for part, part_codes in zip(parts, codes, strict=True):
        part_slots = slots[start : start + len(part_codes)]
        start += len(part_codes)
        order = np.argsort(part_slots // chunk_blocks, kind="stable")
        chunk_of = part_slots[order] // chunk_blocks
        cuts = np.flatnonzero(np.diff(chunk_of)) + 1
        for run in np.split(part_slots[order], cuts):
            if len(run):
                pieces[int(run[0]) // chunk_blocks].append((part, run % chunk_blocks))
    return [
        _build_chunk(
            blocks[c * chunk_blocks : (c + 1) * chunk_blocks], pieces[c], block_size, group, max_rows, device
        )
        for c in range(num_chunks)
    ]


def _build_chunk(
    codes: np.ndarray,
    pieces: list[tuple[ColdPart, np.ndarray]],
    block_size: int,
    group: int,
    max_rows: int,
    device: torch.device,
) -> StreamChunk:
    """One chunk: the blocks of `codes` (id * 2 + disk) fill its staging slots in order; each
    piece's table lists its slots."""
    t = max(1, min(max_rows // group, max(p.row_end - p.row_start for p, _ in pieces)))
    gathers: list[tuple[int, torch.Tensor, torch.Tensor, int]] = []
    tiers = np.where(codes & 1, TIER_DISK, TIER_CPU)
    bounds = [0, *(np.flatnonzero(np.diff(tiers)) + 1).tolist(), len(codes)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):  # one gather per run of one tier
        host_ids = torch.from_numpy(codes[a:b] >> 1)
        gathers.append((int(tiers[a]), host_ids, host_ids.to(device), a))
    tables: list[np.ndarray] = []
    seq_lens: list[int] = []
    q_rows: list[int] = []
    valid: list[int] = []
    for part, table in pieces:
        for r0 in range(part.row_start, part.row_end, t):
            r1 = min(part.row_end, r0 + t)
            valid.extend(range(len(q_rows), len(q_rows) + r1 - r0))
            q_rows.extend(list(range(r0, r1)) + [r0] * (t - (r1 - r0)))
            tables.append(table)
            seq_lens.append(len(table) * block_size)
    width = max(len(tb) for tb in tables)
    if len(pieces) == 1:  # one sequence (a prefill chunk): every query reads the same row
        bt = torch.from_numpy(tables[0].astype(np.int32)).to(device)[None].expand(len(tables), width)
    else:
        rows_bt = np.zeros((len(tables), width), dtype=np.int32)
        for i, tb in enumerate(tables):
            rows_bt[i, : len(tb)] = tb
        bt = torch.from_numpy(rows_bt).to(device)
    rows_t = torch.tensor(q_rows, dtype=torch.int64)
    valid_t = torch.tensor(valid, dtype=torch.int64)
    return StreamChunk(
        gathers=gathers,
        num_blocks=len(codes),
        tokens_per_query=t,
        block_tables=bt,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32).to(device),
        q_rows=rows_t.to(device),
        valid=valid_t.to(device),
        target=rows_t[valid_t].to(device),
    )


class StreamStager:
    """Two host and two device staging buffers of `chunk_blocks` per-layer blocks, with events.

    Long-lived (owned by the cold backend): events order buffer reuse across layers and steps.
    """

    def __init__(self, storage: TieredKVStorage, chunk_blocks: int) -> None:
        shape, dtype = storage.layout.staging_shape(chunk_blocks)
        self.storage = storage
        self.chunk_blocks = chunk_blocks
        self.is_cuda = storage.device.type == "cuda"
        # device: 2 x [chunk_blocks, 2, block_size, num_kv_heads, row_dim], a kv_layer each (int8 rows
        # carry their scales, so the decode kernel reads staged blocks as it reads the pool); raw
        # bytes for a mixed pool, viewed per layer (`layer_buf`, storage/layout.py)
        self.device_bufs = [torch.empty(shape, dtype=dtype, device=storage.device) for _ in range(2)]
        self.host_bufs = (
            [allocate_host_pool(shape, dtype, pin=True)[0] for _ in range(2)]
            if self.is_cuda
            else self.device_bufs
        )
        # Per buffer: the last H2D into it (fresh events per copy, so the timer's pairs stay
        # intact) and the last kernel that read it.
        self.loaded = [torch.cuda.Event() for _ in range(2)] if self.is_cuda else []
        self.free = [torch.cuda.Event() for _ in range(2)] if self.is_cuda else []
        self.copy_timer = EventTimer()
        self.bytes_loaded = 0
        # Pinned cpu-tier blocks are read in place by a gather kernel (no host gather, no staging).
        self.uva = self.is_cuda and storage.cpu_pinned

    def load(self, buf: int, layer_idx: int, chunk: StreamChunk) -> None:
        """Bring `chunk`'s blocks of `layer_idx` into device buffer `buf` (async on CUDA)."""
        dev, host = (
            self.layer_buf(self.device_bufs, buf, layer_idx),
            self.layer_buf(self.host_bufs, buf, layer_idx),
        )
        n = chunk.num_blocks
        self.bytes_loaded += dev[:n].numel() * dev.element_size()
        stream = self.storage.copy_stream
        if stream is None:  # off CUDA: gather straight into the (host) device buffer
            for tier, ids, _, offset in chunk.gathers:
                self.storage.gather_layer(tier, layer_idx, ids, dev[offset : offset + len(ids)])
            return
        in_place = [g for g in chunk.gathers if self.uva and g[0] == TIER_CPU]
        staged = [g for g in chunk.gathers if not (self.uva and g[0] == TIER_CPU)]
        if staged:
            self.loaded[buf].synchronize()  # the previous H2D out of this host buffer is done
        for tier, ids, _, offset in staged:
            self.storage.gather_layer(tier, layer_idx, ids, host[offset : offset + len(ids)])
        started, loaded = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            stream.wait_event(self.free[buf])
            started.record(stream)
            for _, _, dev_ids, offset in in_place:
                gather_blocks(self.storage.tier_layer(TIER_CPU, layer_idx), dev_ids, dev[offset:])
            for _, ids, _, offset in staged:
                dev[offset : offset + len(ids)].copy_(host[offset : offset + len(ids)], non_blocking=True)
            loaded.record(stream)
        self.loaded[buf] = loaded
        self.copy_timer.add(started, loaded)

    def layer_buf(self, bufs: list[torch.Tensor], buf: int, layer_idx: int) -> torch.Tensor:
        """Staging buffer `buf` of `bufs` as layer `layer_idx`'s blocks."""
        return self.storage.layout.staged_layer(bufs[buf], layer_idx)

    def attend(
        self,
        buf: int,
        layer_idx: int,
        chunk: StreamChunk,
        q_cold: torch.Tensor,
        scale: float,
        acc_o: torch.Tensor,
        acc_lse: torch.Tensor,
    ) -> None:
        """Run the decode kernel over buffer `buf` for `chunk` and merge into the accumulator."""
        num_kv_heads = self.storage.layout.num_kv_heads
        t = chunk.tokens_per_query
        q = q_cold.index_select(0, chunk.q_rows)  # [num_queries * T, num_heads, head_dim]
        folded = fold_queries(q.view(-1, t, *q.shape[1:]), num_kv_heads)
        kv_layer = self.layer_buf(self.device_bufs, buf, layer_idx)
        if self.is_cuda:
            torch.cuda.current_stream(self.storage.device).wait_event(self.loaded[buf])
            o, lse = paged_decode_attention(folded, kv_layer, chunk.block_tables, chunk.seq_lens, scale)
            self.free[buf].record(torch.cuda.current_stream(self.storage.device))
        else:
            o, lse = paged_decode_attention_ref(folded, kv_layer, chunk.block_tables, chunk.seq_lens, scale)
        o, lse = unfold_outputs(o, lse, t, num_kv_heads)
        merge_rows_into(
            acc_o, acc_lse, chunk.target, o.index_select(0, chunk.valid), lse.index_select(0, chunk.valid)
        )
