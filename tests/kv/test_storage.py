"""TieredKVStorage: the pools of the three tiers share one per-block layout; views write through."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from kvspill.kv.storage import KVLayout, KVStorage, TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

LAYOUT = KVLayout(num_layers=3, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.float32)
BLOCK_SHAPE = (3, 2, 4, 2, 16)


def test_pools_share_the_block_layout(tmp_path):
    storage = TieredKVStorage(
        LAYOUT, 8, torch.device("cpu"), num_cpu_blocks=5, num_disk_blocks=6, disk_dir=tmp_path / "kv"
    )
    assert isinstance(storage, KVStorage)
    for tier, n in ((TIER_GPU, 8), (TIER_CPU, 5), (TIER_DISK, 6)):
        pool = storage.pool(tier)
        assert pool.shape == (n, *BLOCK_SHAPE) and pool.dtype == torch.float32 and pool.is_contiguous()
        for layer in range(3):
            view = storage.tier_layer(tier, layer)
            assert view.shape == (n, 2, 4, 2, 16)
            view[n - 1, 1, 2, 0, 3] = 100.0 + layer  # writes through to the pool
            assert pool[n - 1, layer, 1, 2, 0, 3] == 100.0 + layer
    assert storage.layer(1).data_ptr() == storage.tier_layer(TIER_GPU, 1).data_ptr()
    assert storage.num_cpu_blocks == 5 and storage.num_disk_blocks == 6
    assert storage.host_nbytes == 5 * LAYOUT.block_bytes and storage.disk_nbytes == 6 * LAYOUT.block_bytes
    assert storage.copy_stream is None and not storage.cpu_pinned
    assert os.listdir(tmp_path / "kv") == []  # the spill file is unlinked once mapped


def test_no_cold_tiers_by_default():
    storage = TieredKVStorage(LAYOUT, 4, torch.device("cpu"))
    assert storage.num_cpu_blocks == 0 and storage.num_disk_blocks == 0 and storage.disk is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_disk_pool_is_the_memory_map(tmp_path, dtype):
    layout = KVLayout(num_layers=2, block_size=4, num_kv_heads=1, head_dim=16, dtype=dtype)
    storage = TieredKVStorage(layout, 2, torch.device("cpu"), num_disk_blocks=3, disk_dir=tmp_path)
    assert storage.disk is not None
    data = torch.randn(3, 2, 2, 4, 1, 16).to(dtype)
    storage.disk_cache.copy_(data)
    storage.disk.flush()
    # Read the bytes back through numpy's view of the mapping, not through the torch tensor.
    raw = torch.from_numpy(storage.disk._memmap.copy())[:3]
    assert torch.equal(raw.view(dtype).view(data.shape), data)
    assert storage.disk_cache.untyped_storage().data_ptr() == storage.disk._memmap.ctypes.data


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works with CUDA")
def test_pinning_refused_falls_back_to_pageable(caplog):
    with caplog.at_level(logging.WARNING):
        storage = TieredKVStorage(LAYOUT, 2, torch.device("cpu"), num_cpu_blocks=3, pin_memory=True)
    assert not storage.cpu_pinned and storage.cpu_cache.shape == (3, *BLOCK_SHAPE)
    assert "could not pin" in caplog.text
