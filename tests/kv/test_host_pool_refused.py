"""A cpu KV tier the host cannot allocate (pinning refused, then pageable memory refused) is one
line naming --cpu-kv-budget, not numpy's traceback (issue 50, item 4)."""

from __future__ import annotations

import pytest
import torch

from kvspill.errors import OutOfKVMemoryError
from kvspill.storage.storage import allocate_host_pool


def test_a_pool_larger_than_any_memory_is_one_line() -> None:
    shape = (2**20, 2**20, 2**10)  # 1 PiB of int8: no host allocates it, pinned or not
    with pytest.raises(OutOfKVMemoryError) as info:
        allocate_host_pool(shape, torch.int8, pin=False)
    message = str(info.value)
    assert "\n" not in message and "--cpu-kv-budget" in message and "1048576.0 GiB" in message


def test_a_pool_that_fits_is_zeroed_pageable_memory() -> None:
    pool, pinned = allocate_host_pool((4, 16), torch.float16, pin=False)
    assert not pinned and pool.shape == (4, 16) and not bool(pool.any())
