"""DiskPool: file I/O whose errors are exceptions (`DiskTierIOError` naming the file, offset and
block ids), runs of consecutive ids read in one call, blocks whose write failed never read as
data, a truncated file stops writes; the transfer engine finishes a plan around a failed run;
a cold tier's failed blocks are retired for good."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import torch

from kvspill.errors import DiskTierIOError
from kvspill.kv.cold_pool import ColdBlockPool
from kvspill.kv.tier_prefix import ColdPrefixCache
from kvspill.storage import disk_pool
from kvspill.storage.disk_pool import DiskPool, block_runs
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.storage.transfer import KVTransferEngine
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, BlockMove, TransferPlan

LAYOUT = KVLayout(num_layers=3, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.bfloat16)
SHAPE = (3, 2, 4, 2, 8)


def _pool(tmp_path, n: int = 8) -> tuple[DiskPool, torch.Tensor]:
    pool = DiskPool(LAYOUT, n, tmp_path)
    data = torch.randn(n, *SHAPE).to(LAYOUT.dtype)
    pool.write_blocks(np.arange(n), data)
    return pool, data


def _eio(*args: object) -> int:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def _count_reads(monkeypatch) -> list[int]:
    """os.preadv through a wrapper that records each call's file offset (the list returned)."""
    offsets: list[int] = []
    real = os.preadv

    def counting(fd: int, buffers: list, offset: int) -> int:  # type: ignore[type-arg]
        offsets.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", counting)
    return offsets


def test_runs_of_consecutive_ids() -> None:
    assert block_runs(np.array([4, 5, 6, 0, 2, 3, 9])) == [(0, 4, 3), (3, 0, 1), (4, 2, 2), (6, 9, 1)]
    assert block_runs(np.array([], dtype=np.int64)) == []


def test_a_layer_of_a_run_is_one_read(tmp_path, monkeypatch) -> None:
    pool, data = _pool(tmp_path)
    calls = _count_reads(monkeypatch)
    out = torch.empty(6, *SHAPE[1:], dtype=LAYOUT.dtype)
    pool.read_layer(np.array([1, 2, 3, 4, 6, 7]), 2, out)
    assert len(calls) == 2 and torch.equal(out, data[[1, 2, 3, 4, 6, 7], 2])
    calls.clear()
    pool.read_layer(np.array([7, 3, 6, 1, 4, 2]), 0, out)  # any order: read in ascending runs
    assert len(calls) == 2 and torch.equal(out, data[[7, 3, 6, 1, 4, 2], 0])
    calls.clear()
    whole = torch.empty(6, *SHAPE, dtype=LAYOUT.dtype)
    pool.read_blocks(np.array([1, 2, 3, 4, 6, 7]), whole)
    assert len(calls) == 2 * 3 and torch.equal(whole, data[[1, 2, 3, 4, 6, 7]])  # runs x layers


def test_reads_on_several_threads_in_pieces_give_the_same_blocks(tmp_path, monkeypatch) -> None:
    """Runs cut into pieces of two blocks, read on four threads: ascending ids, any order, whole
    blocks; a failing piece raises its own DiskTierIOError once every piece has ended."""
    pool = DiskPool(LAYOUT, 16, tmp_path, read_threads=4)
    data = torch.randn(16, *SHAPE).to(LAYOUT.dtype)
    pool.write_blocks(np.arange(16), data)
    monkeypatch.setattr(disk_pool, "_READ_PIECE_BYTES", 2 * pool.layout.layer_bytes(0))
    monkeypatch.setattr(disk_pool, "_PARALLEL_READ_MIN_BYTES", 0)
    real = os.preadv
    offsets = _count_reads(monkeypatch)
    ids = np.array([0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12])
    out = torch.empty(len(ids), *SHAPE[1:], dtype=LAYOUT.dtype)
    pool.read_layer(ids, 1, out)
    assert torch.equal(out, data[ids, 1]) and len(offsets) == 4 + 2  # runs of 7 and 4: pieces of 2
    shuffled = np.array([12, 3, 0, 9, 5, 1, 11, 6, 2, 10, 4])
    pool.read_layer(shuffled, 2, out)
    assert torch.equal(out, data[shuffled, 2])
    whole = torch.empty(len(ids), *SHAPE, dtype=LAYOUT.dtype)
    pool.read_blocks(shuffled, whole)
    assert torch.equal(whole, data[shuffled])
    bad_offset = (1 * 16 + 9) * pool.layout.layer_bytes(0)  # layer 1, the piece of blocks 9 and 10

    def failing(fd: int, buffers: list, offset: int) -> int:  # type: ignore[type-arg]
        if offset == bad_offset:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", failing)
    with pytest.raises(DiskTierIOError) as info:
        pool.read_layer(ids, 1, out)
    assert info.value.block_ids == (9, 10) and pool.num_read_errors == 1
    pool.close()


def test_a_read_error_names_the_file_offset_and_blocks(tmp_path, monkeypatch) -> None:
    pool, data = _pool(tmp_path)
    monkeypatch.setattr(os, "preadv", _eio)
    out = torch.empty(2, *SHAPE[1:], dtype=LAYOUT.dtype)
    with pytest.raises(DiskTierIOError) as info:
        pool.read_layer(np.array([5, 6]), 1, out)
    e = info.value
    assert isinstance(e, OSError) and e.errno == errno.EIO and e.op == "read" and not e.broken
    assert e.block_ids == (5, 6) and e.offset == (8 + 5) * pool.layout.layer_bytes(0)
    assert "read of 2 blocks (5..6)" in str(e) and str(tmp_path) in str(e) and "Input/output error" in str(e)
    assert pool.num_read_errors == 1 and pool.broken is None
    monkeypatch.undo()  # a transient error: the pool reads again
    pool.read_layer(np.array([5, 6]), 1, out)
    assert torch.equal(out, data[[5, 6], 1])


def test_a_failed_write_leaves_blocks_that_read_as_errors(tmp_path, monkeypatch) -> None:
    pool, data = _pool(tmp_path)
    monkeypatch.setattr(os, "pwritev", _eio)
    with pytest.raises(DiskTierIOError, match="write of 2 blocks") as info:
        pool.write_blocks(np.array([2, 3]), data[:2])
    assert info.value.broken and pool.num_write_errors == 1
    monkeypatch.undo()
    with pytest.raises(DiskTierIOError, match="an earlier write of these blocks failed"):
        pool.read_blocks(np.array([1, 2]), torch.empty(2, *SHAPE, dtype=LAYOUT.dtype))
    out = torch.empty(1, *SHAPE, dtype=LAYOUT.dtype)
    pool.read_blocks(np.array([4]), out)  # the others are intact
    assert torch.equal(out[0], data[4])
    with pytest.raises(DiskTierIOError, match="takes no more writes"):  # broken: no more writes
        pool.write_blocks(np.array([5]), data[:1])


def test_a_truncated_file_reads_short_and_takes_no_writes(tmp_path) -> None:
    pool, data = _pool(tmp_path)
    os.ftruncate(pool.fd, pool.layout.layer_bytes(0) * 8)  # layer 0 survives, layers 1 and 2 are gone
    out = torch.empty(1, *SHAPE[1:], dtype=LAYOUT.dtype)
    pool.read_layer(np.array([3]), 0, out)
    assert torch.equal(out[0], data[3, 0])
    with pytest.raises(DiskTierIOError, match=r"ends before the block \(truncated\?\)") as info:
        pool.read_layer(np.array([3]), 1, out)
    assert info.value.broken
    with pytest.raises(DiskTierIOError, match="truncated"):
        pool.write_blocks(np.array([0]), data[:1])
    assert os.fstat(pool.fd).st_size == pool.layout.layer_bytes(0) * 8  # never extended with holes


def test_a_failed_run_does_not_stop_the_plan(tmp_path, monkeypatch) -> None:
    storage = TieredKVStorage(
        LAYOUT, 8, torch.device("cpu"), num_cpu_blocks=4, num_disk_blocks=4, disk_dir=tmp_path
    )
    storage.kv_cache.copy_(torch.randn(storage.kv_cache.shape).to(LAYOUT.dtype))
    want = storage.kv_cache[[0, 5]].clone()
    monkeypatch.setattr(os, "pwritev", _eio)
    engine = KVTransferEngine(storage)
    plan = TransferPlan(
        [BlockMove("a", 1, TIER_GPU, 1, TIER_DISK, 0), BlockMove("b", 1, TIER_GPU, 0, TIER_CPU, 2),
         BlockMove("b", 2, TIER_GPU, 5, TIER_CPU, 3)]
    )  # fmt: skip
    with pytest.raises(DiskTierIOError, match="write of block 0"):
        engine.execute(plan)
    assert torch.equal(storage.cpu_cache[[2, 3]], want)  # the moves after the failed one ran


def test_retired_blocks_leave_the_tier_for_good() -> None:
    pool = ColdBlockPool(TIER_DISK, 6)
    used = [pool.allocate() for _ in range(3)]
    assert used == [0, 1, 2] and pool.cache(1, 11)
    pool.free(0)
    assert pool.cache(2, 12)
    pool.free(2)  # cached-free
    assert pool.retire([1, 2, 4]) == 3 and pool.retire([4]) == 0
    assert pool.num_blocks == 3 and pool.lookup(11) is None and pool.lookup(12) is None
    assert pool.free_block_ids() == [0, 3, 5] and pool.num_used_blocks == 1  # block 1 still held
    assert not pool.cache(1, 21)  # no new hash for a retired block
    pool.free(1)  # its holder lets go: it vanishes
    assert pool.free_block_ids() == [0, 3, 5] and pool.num_used_blocks == 0
    assert pool.retire_all() == 3 and pool.num_blocks == 0 and pool.num_free_blocks == 0


def test_a_broken_disk_tier_takes_no_spills_and_a_failed_read_retires_its_blocks() -> None:
    cache = ColdPrefixCache(ColdBlockPool(TIER_CPU, 2), ColdBlockPool(TIER_DISK, 8), block_size=4)
    read = DiskTierIOError("read", "/x", 0, (3, 4), "Input/output error", errno.EIO, broken=False)
    cache.on_disk_error(read)
    assert cache.disk.num_blocks == 6 and 3 not in cache.disk.free_block_ids()
    write = DiskTierIOError("write", "/x", 0, (0,), "Input/output error", errno.EIO, broken=True)
    cache.on_disk_error(write)
    assert cache.disk.num_blocks == 0 and cache.disk.num_free_blocks == 0 and cache.cpu.num_blocks == 2
    assert cache.allocate_for_load() == (TIER_CPU, 0)
