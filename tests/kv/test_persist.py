"""The persist dir's store (storage/persist.py) on its own: a round trip of block bytes, the index read
on start, LRU eviction within the budget (exact files), and what is skipped."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from kvspill.kernels.kv_quant import dequantize_kv, int8_scales, quantize_kv
from kvspill.storage.persist import PersistStore, kv_fingerprint, scan_dir
from kvspill.storage.storage import KVLayout

LAYOUT = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.bfloat16)
FP = kv_fingerprint({"model": "test"})


def _block(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((2, 2, 4, 2, 8), generator=g).to(torch.bfloat16)


def _store(path, budget: int = 1 << 30, fingerprint: int = FP, layout: KVLayout = LAYOUT) -> PersistStore:
    return PersistStore(path, budget, fingerprint, layout)


def _write(store: PersistStore, hashes: list[int]) -> None:
    for h in hashes:
        assert store.submit(h, _block(h), token=("t", h))
        store.flush()
        os.utime(store.directory / f"{h:016x}.kvb", (1000 + h, 1000 + h))  # distinct recency


def test_blocks_round_trip_and_are_found_after_a_restart(tmp_path):
    store = _store(tmp_path)
    _write(store, [1, 2])
    assert not store.submit(1, _block(1))  # stored already
    assert sorted(store.take_written()) == [("t", 1), ("t", 2)]
    store.close()
    again = _store(tmp_path)
    assert again.num_blocks == 2 and again.contains(1) and again.contains(2)
    dst = torch.zeros((2, 2, 4, 2, 8), dtype=torch.bfloat16)
    assert again.load_into(2, dst) and torch.equal(dst, _block(2))
    assert again.num_loaded == 1 and again.bytes_loaded == (tmp_path / f"{2:016x}.kvb").stat().st_size
    again.close()


def test_the_budget_evicts_the_least_recently_used_files(tmp_path):
    probe = _store(tmp_path / "probe")
    _write(probe, [1])
    file_bytes = (tmp_path / "probe" / f"{1:016x}.kvb").stat().st_size  # every file here: same size
    probe.close()
    store = _store(tmp_path / "dir", budget=2 * file_bytes + file_bytes // 2)
    _write(store, [1, 2])
    dst = torch.zeros((2, 2, 4, 2, 8), dtype=torch.bfloat16)
    assert store.load_into(1, dst)  # 1 is now the most recently used
    _write(store, [3])
    assert sorted(p.name for p in (tmp_path / "dir").glob("*.kvb")) == [f"{1:016x}.kvb", f"{3:016x}.kvb"]
    assert not store.contains(2) and store.contains(1) and store.contains(3)
    store.close()


def test_other_configurations_torn_files_and_leftover_tmp_are_skipped(tmp_path, caplog):
    store = _store(tmp_path)
    _write(store, [1, 2, 3])
    store.close()
    (tmp_path / f"{2:016x}.kvb").write_bytes((tmp_path / f"{2:016x}.kvb").read_bytes()[:-1])  # torn
    (tmp_path / f"{9:016x}.kvb.tmp").write_bytes(b"partial")  # a crash mid-write
    with caplog.at_level(logging.WARNING, logger="kvspill.storage.persist"):
        again = _store(tmp_path)
    assert again.num_blocks == 2 and not again.contains(2) and again.num_skipped == 1
    assert any("torn" in r.message for r in caplog.records)
    assert not (tmp_path / f"{9:016x}.kvb.tmp").exists()
    again.close()
    with caplog.at_level(logging.WARNING, logger="kvspill.storage.persist"):
        other = _store(tmp_path, fingerprint=FP + 1)
        fp8 = _store(tmp_path, layout=KVLayout(2, 4, 2, 8, torch.float8_e4m3fn))
    assert other.num_blocks == 0 and fp8.num_blocks == 0
    assert any("fingerprint differs" in r.message for r in caplog.records)
    assert any("block layout" in r.message for r in caplog.records)
    good, bad = scan_dir(tmp_path)  # left alone: another engine's files are not deleted
    assert len(good) == 2 and len(bad) == 1
    other.close()
    fp8.close()


@pytest.mark.parametrize("offset", [-5, 30])  # a payload byte; a header byte (JSON)
def test_a_corrupt_file_is_not_loaded(tmp_path, caplog, offset):
    store = _store(tmp_path)
    _write(store, [1])
    path = tmp_path / f"{1:016x}.kvb"
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x55
    path.write_bytes(bytes(data))
    store.close()
    with caplog.at_level(logging.WARNING, logger="kvspill.storage.persist"):
        again = _store(tmp_path)
        dst = torch.zeros((2, 2, 4, 2, 8), dtype=torch.bfloat16)
        loaded = again.contains(1) and again.load_into(1, dst)
    assert not loaded and not torch.equal(dst, _block(1))
    assert any("skipping" in r.message for r in caplog.records)
    again.close()


def test_int8_blocks_round_trip_with_their_scales_and_other_formats_are_skipped(tmp_path):
    """--kv-cache-dtype int8: a persisted block is its bytes, scales included (rows end with
    them); an engine with another KV format does not load it."""
    int8 = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.int8)
    block = quantize_kv(torch.randn((2, 2, 4, 2, 8), generator=torch.Generator().manual_seed(4)), torch.int8)
    store = _store(tmp_path, layout=int8)
    assert store.submit(9, block)
    store.flush()
    store.close()
    again = _store(tmp_path, layout=int8)
    dst = torch.zeros_like(block)
    assert again.load_into(9, dst) and torch.equal(dst, block)
    assert torch.equal(dequantize_kv(dst), dequantize_kv(block)) and (int8_scales(dst) > 0).all()
    again.close()
    assert not _store(tmp_path).contains(9)  # a bf16 engine skips it


def test_a_fifo_named_like_a_block_does_not_hang_start_up(tmp_path, caplog):
    """issue 48, item 11: opening a FIFO blocks until a writer comes; start-up must skip it."""
    os.mkfifo(tmp_path / f"{7:016x}.kvb")
    _write(_store(tmp_path), [1])
    with caplog.at_level(logging.WARNING, logger="kvspill"):
        store = _store(tmp_path)  # returns at once (the test's timeout would catch a hang)
    assert store.num_blocks == 1 and store.num_skipped == 1
    assert "not a regular file" in caplog.text
    store.close()


def test_a_failed_write_leaves_no_tmp_file(tmp_path, monkeypatch):
    """A full disk mid-write: the partial .tmp goes at once, not at the next start."""
    store = _store(tmp_path)
    real_fsync = os.fsync

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    assert store.submit(5, _block(5))
    store.flush()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert list(tmp_path.iterdir()) == [] and not store.contains(5)
    store.close()


@pytest.mark.parametrize("bad", ["a_file/sub", "a_file"])
def test_a_bad_persist_dir_is_one_clear_error(tmp_path, bad):
    from kvspill.errors import PersistDirError

    (tmp_path / "a_file").write_text("x")
    with pytest.raises(PersistDirError, match="--kv-persist-dir .*give a writable directory"):
        _store(tmp_path / bad)
