"""The disk KV tier reserves its space at creation: a filesystem too small for the budget is a
clear `DiskTierError` at start-up (never a SIGBUS on the first spill), on a real small tmpfs
where the test may mount one and with an injected ENOSPC everywhere."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from kvspill.errors import DiskTierError
from kvspill.storage.disk_pool import DiskPool
from kvspill.storage.storage import KVLayout

LAYOUT = KVLayout(num_layers=2, block_size=16, num_kv_heads=2, head_dim=64, dtype=torch.float16)  # 16 KiB


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, where this process may mount one (root in a container), else skip."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def test_a_disk_too_small_for_the_budget_fails_at_creation(small_tmpfs: Path) -> None:
    blocks = 4 * (1 << 20) // LAYOUT.block_bytes  # 4 MiB on a 1 MiB filesystem
    with pytest.raises(DiskTierError, match=r"needs 4\.0 MiB .*--disk-kv-budget") as info:
        DiskPool(LAYOUT, blocks, small_tmpfs)
    assert "No space left" in str(info.value)
    assert os.listdir(small_tmpfs) == []  # nothing left behind


def test_a_pool_that_fits_writes_every_block(small_tmpfs: Path) -> None:
    blocks = (1 << 20) // LAYOUT.block_bytes // 2  # half the filesystem
    pool = DiskPool(LAYOUT, blocks, small_tmpfs)
    ones = torch.ones((blocks, LAYOUT.num_layers, 2, 16, 2, 64), dtype=LAYOUT.dtype)
    pool.write_blocks(np.arange(blocks), ones)  # the space is reserved: no ENOSPC
    back = torch.zeros_like(ones)
    pool.read_blocks(np.arange(blocks), back)
    assert bool((back == 1.0).all())
    pool.close()  # before the fixture unmounts


def test_injected_enospc_is_a_start_up_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(DiskTierError, match="could not reserve it"):
        DiskPool(LAYOUT, 8, tmp_path)
    assert os.listdir(tmp_path) == []


def test_an_unwritable_directory_is_a_start_up_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DiskTierError, match="writable --kv-disk-dir"):
        DiskPool(LAYOUT, 8, blocker / "kv")
