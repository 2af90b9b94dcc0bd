"""The stream path's chunk plan (attention/cold/stream.plan_chunks): every sequence reads exactly its own
cold blocks through its table rows, and a block several sequences share (a common prefix of
concurrent requests) is loaded once per chunk plan, not once per sequence."""

from __future__ import annotations

import numpy as np
import torch

from kvspill.attention.cold.stream import ColdPart, plan_chunks
from kvspill.types import TIER_CPU, TIER_DISK


def _part(row: int, cpu: list[int], disk: list[int], rows: int = 1) -> ColdPart:
    return ColdPart(row, row + rows, np.array(cpu, dtype=np.int64), np.array(disk, dtype=np.int64))


def _read(chunks, rows: tuple[int, int]) -> list[tuple[int, int]]:
    """(tier, id) of every block that the table rows of one part (cold rows `rows`) attend, over
    all chunks; the part's rows of one chunk share one table, so its first row is read."""
    seen = []
    for chunk in chunks:
        slots: dict[int, tuple[int, int]] = {}
        for tier, ids, _, offset in chunk.gathers:
            for i, b in enumerate(ids.tolist()):
                slots[offset + i] = (tier, b)
        assert sorted(slots) == list(range(chunk.num_blocks))  # every slot loaded once
        first_rows = chunk.q_rows.tolist()[:: chunk.tokens_per_query]  # each table row's first cold row
        q = next((q for q, r in enumerate(first_rows) if rows[0] <= r < rows[1]), None)
        if q is not None:
            num_blocks = int(chunk.seq_lens[q]) // 4
            seen.extend(slots[s] for s in chunk.block_tables[q, :num_blocks].tolist())
    return seen


def test_shared_blocks_load_once_and_every_sequence_reads_its_own():
    prefix_cpu, prefix_disk = list(range(10, 20)), list(range(50, 57))
    parts = [
        _part(0, prefix_cpu + [3], prefix_disk),  # three decodes over one prefix, and their own blocks
        _part(1, prefix_cpu, prefix_disk + [90]),
        _part(2, prefix_cpu[:4], []),
        _part(3, [40, 41], [70], rows=5),  # a prefill chunk of another sequence
    ]
    chunks = plan_chunks(parts, chunk_blocks=6, block_size=4, group=2, max_rows=8, device=torch.device("cpu"))
    distinct = {(TIER_CPU, b) for p in parts for b in p.cpu_block_ids.tolist()}
    distinct |= {(TIER_DISK, b) for p in parts for b in p.disk_block_ids.tolist()}
    assert sum(c.num_blocks for c in chunks) == len(distinct) == 22  # not 18 + 18 + 4 + 3
    for p in parts:
        want = [(TIER_CPU, b) for b in p.cpu_block_ids.tolist()] + [
            (TIER_DISK, b) for b in p.disk_block_ids.tolist()
        ]
        assert sorted(_read(chunks, (p.row_start, p.row_end))) == sorted(want)
    for c in chunks:  # a sequence appears at most once per chunk: its accumulator rows are distinct
        assert len(c.target.tolist()) == len(set(c.target.tolist()))
