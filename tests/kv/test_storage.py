"""TieredKVStorage: the pools of the three tiers share one per-block layout; views write through."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

from kvspill.storage.storage import KVLayout, KVStorage, TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

LAYOUT = KVLayout(num_layers=3, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.float32)
BLOCK_SHAPE = (3, 2, 4, 2, 16)


def test_pools_share_the_block_layout(tmp_path):
    storage = TieredKVStorage(
        LAYOUT, 8, torch.device("cpu"), num_cpu_blocks=5, num_disk_blocks=6, disk_dir=tmp_path / "kv"
    )
    assert isinstance(storage, KVStorage)
    for tier, n in ((TIER_GPU, 8), (TIER_CPU, 5)):
        pool = storage.pool(tier)
        assert pool.shape == (n, *BLOCK_SHAPE) and pool.dtype == torch.float32 and pool.is_contiguous()
        for layer in range(3):
            view = storage.tier_layer(tier, layer)
            assert view.shape == (n, 2, 4, 2, 16)
            view[n - 1, 1, 2, 0, 3] = 100.0 + layer  # writes through to the pool
            assert pool[n - 1, layer, 1, 2, 0, 3] == 100.0 + layer
    with pytest.raises(ValueError, match="the disk tier is a file"):
        storage.pool(TIER_DISK)
    assert storage.read_blocks(TIER_DISK, [5]).shape == (1, *BLOCK_SHAPE)  # zeros until written
    assert storage.layer(1).data_ptr() == storage.tier_layer(TIER_GPU, 1).data_ptr()
    assert storage.num_cpu_blocks == 5 and storage.num_disk_blocks == 6
    assert storage.host_nbytes == 5 * LAYOUT.block_bytes and storage.disk_nbytes == 6 * LAYOUT.block_bytes
    assert storage.copy_stream is None and not storage.cpu_pinned
    assert os.listdir(tmp_path / "kv") == []  # the spill file is unlinked once open


def test_no_cold_tiers_by_default():
    storage = TieredKVStorage(LAYOUT, 4, torch.device("cpu"))
    assert storage.num_cpu_blocks == 0 and storage.num_disk_blocks == 0 and storage.disk is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_disk_blocks_and_layers_read_back_what_was_written(tmp_path, dtype):
    layout = KVLayout(num_layers=2, block_size=4, num_kv_heads=1, head_dim=16, dtype=dtype)
    storage = TieredKVStorage(layout, 2, torch.device("cpu"), num_disk_blocks=7, disk_dir=tmp_path)
    assert storage.disk is not None
    data = torch.randn(7, 2, 2, 4, 1, 16).to(dtype)
    storage.write_blocks(TIER_DISK, [4, 5, 6, 0, 1, 2, 3], data[[4, 5, 6, 0, 1, 2, 3]])  # two runs
    assert torch.equal(storage.read_blocks(TIER_DISK, list(range(7))), data)
    ids = np.array([6, 2, 3, 4, 0])  # runs of one, three, one
    for layer in range(2):
        out = torch.empty(5, 2, 4, 1, 16, dtype=dtype)
        storage.gather_layer(TIER_DISK, layer, ids, out)
        assert torch.equal(out, data[ids, layer])
    # Layer-major on disk: layer 1 of block 0 starts after layer 0 of every block.
    raw = os.pread(storage.disk.fd, storage.layout.layer_bytes(0), 7 * storage.layout.layer_bytes(0))
    assert torch.equal(torch.frombuffer(bytearray(raw), dtype=dtype).view(2, 4, 1, 16), data[0, 1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works with CUDA")
def test_pinning_refused_falls_back_to_pageable(caplog):
    with caplog.at_level(logging.WARNING):
        storage = TieredKVStorage(LAYOUT, 2, torch.device("cpu"), num_cpu_blocks=3, pin_memory=True)
    assert not storage.cpu_pinned and storage.cpu_cache.shape == (3, *BLOCK_SHAPE)
    assert "could not pin" in caplog.text
