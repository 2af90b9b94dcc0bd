"""Dev only: prefix_bench with the disk reads and chunk plan of before (MODE=old: one read thread,
a sequence's blocks packed per sequence) or as now (MODE=new), same engine otherwise."""
import os, sys
import numpy as np
import torch
from kvspill.kv import cold_attention, disk_pool
from kvspill.kv.cold_stream import ColdPart, StreamChunk
from kvspill.types import TIER_CPU, TIER_DISK

def plan_chunks(
    parts: list[ColdPart], chunk_blocks: int, block_size: int, group: int, max_rows: int, device: torch.device
) -> list[StreamChunk]:
    """Pack parts into chunks greedily (a part split over chunks fills each but its last), so a
    sequence appears at most once per chunk and its accumulator rows are distinct per merge."""
    pieces: list[list[tuple[ColdPart, list[tuple[int, int]]]]] = [[]]
    used = 0
    for part in parts:
        blocks = [(TIER_CPU, int(b)) for b in part.cpu_block_ids] + [
            (TIER_DISK, int(b)) for b in part.disk_block_ids
        ]
        while blocks:
            if used == chunk_blocks:
                pieces.append([])
                used = 0
            take = min(chunk_blocks - used, len(blocks))
            pieces[-1].append((part, blocks[:take]))
            blocks = blocks[take:]
            used += take
    return [_build_chunk(p, block_size, group, max_rows, device) for p in pieces if p]


def _build_chunk(
    pieces: list[tuple[ColdPart, list[tuple[int, int]]]],
    block_size: int,
    group: int,
    max_rows: int,
    device: torch.device,
) -> StreamChunk:
    t = max(1, min(max_rows // group, max(p.row_end - p.row_start for p, _ in pieces)))
    gathers: list[tuple[int, torch.Tensor, torch.Tensor, int]] = []
    tables: list[list[int]] = []
    seq_lens: list[int] = []
    q_rows: list[int] = []
    valid: list[int] = []
    offset = 0
    for part, blocks in pieces:
        for tier in (TIER_CPU, TIER_DISK):
            ids = [b for tr, b in blocks if tr == tier]
            if ids:  # blocks come cpu first, then disk: each tier's ids are one staging range
                host_ids = torch.tensor(ids, dtype=torch.int64)
                gathers.append((tier, host_ids, host_ids.to(device), offset))
                offset += len(ids)
        table = list(range(offset - len(blocks), offset))
        for r0 in range(part.row_start, part.row_end, t):
            r1 = min(part.row_end, r0 + t)
            valid.extend(range(len(q_rows), len(q_rows) + r1 - r0))
            q_rows.extend(list(range(r0, r1)) + [r0] * (t - (r1 - r0)))
            tables.append(table)
            seq_lens.append(len(blocks) * block_size)
    width = max(len(tb) for tb in tables)
    if len(pieces) == 1:  # one sequence (a prefill chunk): every query reads the same row
        bt = torch.tensor(tables[0], dtype=torch.int32).to(device)[None].expand(len(tables), width)
    else:
        rows_bt = torch.zeros((len(tables), width), dtype=torch.int32)
        for i, tb in enumerate(tables):
            rows_bt[i, : len(tb)] = torch.tensor(tb, dtype=torch.int32)
        bt = rows_bt.to(device)
    rows_t = torch.tensor(q_rows, dtype=torch.int64)
    valid_t = torch.tensor(valid, dtype=torch.int64)
    return StreamChunk(
        gathers=gathers,
        num_blocks=offset,
        tokens_per_query=t,
        block_tables=bt,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32).to(device),
        q_rows=rows_t.to(device),
        valid=valid_t.to(device),
        target=rows_t[valid_t].to(device),
    )


if os.environ.get("THREADS1"):
    disk_pool.default_read_threads = lambda: 1
if os.environ.get("MODE") == "old":
    disk_pool.default_read_threads = lambda: 1
    cold_attention.plan_chunks = plan_chunks
    print("MODE old: one read thread, per-sequence chunks", flush=True)
from kvspill.bench.prefix_bench import main
raise SystemExit(main(sys.argv[1:]))
