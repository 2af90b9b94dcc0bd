"""Execute a step's `TransferPlan`: move whole blocks (all layers, K and V) between KV tiers.

Runs of moves that go the same way between consecutive ids (src i, i+1, ... -> dst j, j+1, ...)
become one slice copy: a block of every layer is one contiguous run of bytes, so a run of n
blocks is one copy of n * block_bytes (aim: 0.5-2 MB per copy, DESIGN.md). The scheduler gets
large copies by handing out consecutive ids.

On CUDA:
- gpu<->cpu copies run on the storage's copy stream, asynchronously (the cpu pool is pinned).
  The copy stream first waits for the compute stream (earlier steps wrote the gpu blocks it
  reads); at the end the compute stream waits for one event recorded after the plan's copies,
  so the forward neither reads a block before it arrives nor overwrites a gpu block (freed by
  a gpu->cpu move and reused in this same step) before it has left. The host never waits.
- cpu<->disk copies are file reads and writes straight into or out of the cpu pool
  (`storage/disk_pool.py`). Before one runs, the host waits for the async copies already issued (a
  cpu block may be the source or target of one), and `wait_host()` does the same for readers of
  the cpu pool on the host (CPU attention, staging of cold blocks).
- gpu<->disk copies go through a host buffer and block the host (not the compute stream) until
  done: a rare, direct spill.
- A disk read or write that fails (`DiskTierIOError`) does not stop the plan: the other moves
  still run (a later move may be another request's, which must not be lost), then the first
  error is raised and the step fails (engine/step_retry.py).
- A host write into the cpu pool (disk->cpu) first waits for the whole copy stream: the cold
  stream path's zero-copy kernels read pinned blocks in place on it.
Off CUDA every copy is a synchronous `copy_`: the same code path, so tests exercise it.

With sparse cold attention, `summaries` (storage/summary.py) follow every run: a block going
cold gets its key summary computed from its gpu copy, on the same stream and before its bytes
leave, so the summary is ready whenever the block is.

Invariant: moves run in plan order (a plan may free a block and reuse its id in a later move);
grouping only merges neighbours in that order. Every move of a plan has finished, for every
later reader in stream order, once `execute` returns.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from kvspill.errors import DiskTierIOError
from kvspill.stats import TransferCounters
from kvspill.storage.storage import TieredKVStorage
from kvspill.storage.summary import BlockSummaries
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, TIER_NAMES, BlockMove, TransferPlan


@dataclass(frozen=True)
class CopyRun:
    """`num_blocks` blocks from src ids [src_start, +n) to dst ids [dst_start, +n): one copy."""

    src_tier: int
    src_start: int
    dst_tier: int
    dst_start: int
    num_blocks: int


def group_moves(moves: list[BlockMove]) -> list[CopyRun]:
    """Merge neighbouring moves of the same direction with consecutive src and dst ids.

    Moves within one tier (a compaction) are never merged: their ranges could overlap. A move of
    the same bytes as the one before it (a shared block leaving for each of its holders:
    `kv/tiers.py`) only updates that holder's table: it is copied once.
    """
    runs: list[CopyRun] = []
    prev: BlockMove | None = None
    for m in moves:
        same_bytes = prev is not None and (
            prev.src_tier,
            prev.src_block_id,
            prev.dst_tier,
            prev.dst_block_id,
        ) == (m.src_tier, m.src_block_id, m.dst_tier, m.dst_block_id)
        prev = m
        if same_bytes:
            continue
        if runs:
            last = runs[-1]
            if (
                last.src_tier == m.src_tier != m.dst_tier == last.dst_tier
                and m.src_block_id == last.src_start + last.num_blocks
                and m.dst_block_id == last.dst_start + last.num_blocks
            ):
                runs[-1] = CopyRun(
                    last.src_tier, last.src_start, last.dst_tier, last.dst_start, last.num_blocks + 1
                )
                continue
        runs.append(CopyRun(m.src_tier, m.src_block_id, m.dst_tier, m.dst_block_id, 1))
    return runs


def direction_name(src_tier: int, dst_tier: int) -> str:
    return f"{TIER_NAMES[src_tier]}_to_{TIER_NAMES[dst_tier]}"


@dataclass
class TransferStats:
    """The running totals behind `TransferCounters` (kvspill/stats.py). `seconds`: host wall time
    inside `execute` (on CUDA the async copies of gpu<->cpu runs finish later; `copy_seconds` is
    their measured stream time, read lazily)."""

    bytes_by_direction: dict[str, int] = field(default_factory=dict)
    num_moves: int = 0
    num_copies: int = 0
    num_plans: int = 0
    seconds: float = 0.0
    copy_seconds: float = 0.0

    def freeze(self) -> TransferCounters:
        return TransferCounters(
            bytes_by_direction=dict(self.bytes_by_direction),
            num_moves=self.num_moves,
            num_copies=self.num_copies,
            num_plans=self.num_plans,
            seconds=self.seconds,
            copy_seconds=self.copy_seconds,
        )


class EventTimer:
    """Sums CUDA event pairs' elapsed time once they have completed (never forces a sync)."""

    def __init__(self) -> None:
        self._pending: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.seconds = 0.0

    def add(self, start: torch.cuda.Event, end: torch.cuda.Event) -> None:
        self._pending.append((start, end))

    def resolve(self) -> float:
        still = []
        for start, end in self._pending:
            if end.query():
                self.seconds += start.elapsed_time(end) / 1e3
            else:
                still.append((start, end))
        self._pending = still
        return self.seconds


class KVTransferEngine:
    """Moves blocks between the tiers of one `TieredKVStorage`; counts bytes, copies and time."""

    def __init__(self, storage: TieredKVStorage, summaries: BlockSummaries | None = None) -> None:
        self.storage = storage
        self.summaries = summaries
        self.is_cuda = storage.device.type == "cuda"
        self.stats = TransferStats()
        self._pending: torch.cuda.Event | None = None  # last async copy on the copy stream
        self._timer = EventTimer()

    def execute(self, plan: TransferPlan) -> None:
        """Run the plan's moves in order (see the module docstring for what waits on what)."""
        if plan.empty:
            return
        t0 = time.perf_counter()
        runs = group_moves(plan.moves)
        stream = self.storage.copy_stream
        start_event = None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(self.storage.device))
            start_event = torch.cuda.Event(enable_timing=True)
            start_event.record(stream)
        error: DiskTierIOError | None = None
        for run in runs:
            self._summarize(run, stream)
            try:
                self._copy(run, stream)
            except DiskTierIOError as e:
                error = error or e
            direction = direction_name(run.src_tier, run.dst_tier)
            nbytes = run.num_blocks * self.storage.layout.block_bytes
            self.stats.bytes_by_direction[direction] = (
                self.stats.bytes_by_direction.get(direction, 0) + nbytes
            )
        if stream is not None and start_event is not None:
            done = torch.cuda.Event(enable_timing=True)
            done.record(stream)
            torch.cuda.current_stream(self.storage.device).wait_event(done)
            self._pending = done
            self._timer.add(start_event, done)
        self.stats.num_moves += len(plan.moves)
        self.stats.num_copies += len(runs)
        self.stats.num_plans += 1
        self.stats.seconds += time.perf_counter() - t0
        if error is not None:
            raise error

    def wait_host(self) -> None:
        """Block the host until every async copy issued so far has finished (cpu pool readable)."""
        if self._pending is not None:
            self._pending.synchronize()
            self._pending = None

    def counters(self) -> TransferCounters:
        """Totals since start (resolves the copy timings that have completed; never syncs)."""
        self.stats.copy_seconds = self._timer.resolve()
        return self.stats.freeze()

    def _summarize(self, run: CopyRun, stream: torch.cuda.Stream | None) -> None:
        if self.summaries is None:
            return
        args = (run.src_tier, run.src_start, run.dst_tier, run.dst_start, run.num_blocks)
        if stream is None:
            self.summaries.on_copy(*args)
            return
        with torch.cuda.stream(stream):
            self.summaries.on_copy(*args)

    def _copy(self, run: CopyRun, stream: torch.cuda.Stream | None) -> None:
        n = run.num_blocks
        for tier, start in ((run.src_tier, run.src_start), (run.dst_tier, run.dst_start)):
            size = self.storage.num_tier_blocks(tier)
            assert 0 <= start and start + n <= size, (
                f"block ids [{start}, {start + n}) outside the {TIER_NAMES[tier]} tier of {size} blocks"
            )
        if run.src_tier == run.dst_tier:
            assert run.src_start != run.dst_start, f"a move onto itself: {run}"
        if TIER_DISK in (run.src_tier, run.dst_tier):
            self._copy_disk(run, stream)
            return
        src_view = self.storage.pool(run.src_tier)[run.src_start : run.src_start + n]
        dst_view = self.storage.pool(run.dst_tier)[run.dst_start : run.dst_start + n]
        if stream is None:
            dst_view.copy_(src_view)
            return
        if TIER_GPU not in (run.src_tier, run.dst_tier):  # host memcpy (within the cpu tier)
            self._sync_host(stream)
            dst_view.copy_(src_view)
            return
        with torch.cuda.stream(stream):  # gpu<->cpu (pinned) or gpu<->gpu: async on the copy stream
            dst_view.copy_(src_view, non_blocking=True)  # pageable (pin refused): CUDA makes it sync

    def _copy_disk(self, run: CopyRun, stream: torch.cuda.Stream | None) -> None:
        """A run from or to the disk tier: file I/O on the host, through the cpu pool in place or a
        host buffer for gpu blocks (the host waits for these copies, as for torch's pageable ones)."""
        storage, n = self.storage, run.num_blocks
        src_ids = np.arange(run.src_start, run.src_start + n)
        dst_ids = np.arange(run.dst_start, run.dst_start + n)
        if stream is not None:
            # Everything on the copy stream may touch the cpu pool: async copies, and the cold
            # stream path's kernels that read pinned blocks in place; gpu sources were written
            # by the compute stream (the copy stream waits for it in `execute`).
            self._sync_host(stream)
        disk = storage.disk
        assert disk is not None, "a move from or to the disk tier without one"
        if run.dst_tier == TIER_CPU:  # disk -> cpu: read straight into the pool
            disk.read_blocks(src_ids, storage.cpu_cache[run.dst_start : run.dst_start + n])
            return
        if run.src_tier == TIER_CPU:  # cpu -> disk: write straight from the pool
            disk.write_blocks(dst_ids, storage.cpu_cache[run.src_start : run.src_start + n])
            return
        # gpu <-> disk (or disk -> disk): through a host buffer; gpu work on the copy stream, ordered
        # with this plan's async copies (a gpu id freed by one may be reused by this move).
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if run.src_tier == TIER_DISK:
                host = storage.read_blocks(TIER_DISK, src_ids)
                if run.dst_tier == TIER_DISK:
                    disk.write_blocks(dst_ids, host)
                else:
                    storage.pool(run.dst_tier)[run.dst_start : run.dst_start + n].copy_(host)
            else:
                gpu_blocks = storage.pool(run.src_tier)[run.src_start : run.src_start + n]
                disk.write_blocks(dst_ids, gpu_blocks.to("cpu"))

    def _sync_host(self, stream: torch.cuda.Stream) -> None:
        stream.synchronize()
        self._pending = None
