"""Fast pinned host pools: zeroed, pinned, usable by H2D copies and the UVA gather kernel."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
import torch

from kvspill.storage.host_memory import FAST_PIN_MIN_BYTES, touch_in_parallel
from kvspill.storage.storage import allocate_host_pool


def test_touching_from_threads_covers_every_byte_and_keeps_zeros() -> None:
    buf = mmap.mmap(-1, 3 * 4096 + 5, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    touch_in_parallel(buf, 4)
    arr = np.frombuffer(buf, dtype=np.uint8)
    assert len(arr) == 3 * 4096 + 5 and not arr.any()


def test_without_cuda_the_pool_is_pageable_zeros() -> None:
    pool, pinned = allocate_host_pool((4, 2, 8), torch.float32, pin=False)
    assert not pinned and not pool.any() and pool.shape == (4, 2, 8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_large_pool_is_registered_zeroed_and_works_for_copies_and_uva() -> None:
    from kvspill.kernels.uva_gather import gather_blocks, gather_blocks_ref

    blocks = FAST_PIN_MIN_BYTES // (2 * 16 * 8 * 64 * 2) + 3  # just over the fast path's threshold
    pool, pinned = allocate_host_pool((blocks, 2, 16, 8, 64), torch.bfloat16, pin=True)
    assert pinned and pool.is_pinned() and hasattr(pool, "_kvspill_host_buffer")
    assert not pool[::97].any()
    pool[:5].normal_()
    on_gpu = torch.empty(5, 2, 16, 8, 64, dtype=torch.bfloat16, device="cuda")
    on_gpu.copy_(pool[:5], non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(on_gpu.cpu(), pool[:5])
    ids = torch.tensor([4, 0, 2], dtype=torch.int64)
    want = torch.zeros(3, 16, 8, 64, dtype=torch.bfloat16)
    got = torch.zeros(3, 16, 8, 64, dtype=torch.bfloat16, device="cuda")
    gather_blocks_ref(pool[:, 1], ids, want)
    gather_blocks(pool[:, 1], ids.cuda(), got)
    assert torch.equal(got.cpu(), want)
