"""The block gather kernel against its reference (Triton interpreter on the CPU, pinned memory on CUDA)."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.uva_gather import gather_blocks, gather_blocks_ref


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gather_matches_reference(dtype):
    g = torch.Generator().manual_seed(0)
    pool = torch.randn(9, 3, 2, 4, 2, 16, generator=g).to(dtype)  # [blocks, layers, 2, block_size, kv, dim]
    if torch.cuda.is_available():
        pool = pool.pin_memory()
    src = pool[:, 1]  # one layer: strided in dim 0, each block contiguous
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ids = torch.tensor([7, 0, 3, 3, 8], dtype=torch.int64)
    want = torch.zeros(6, *src.shape[1:], dtype=dtype, device=device)
    got = torch.zeros_like(want)
    gather_blocks_ref(src, ids, want)
    gather_blocks(src, ids.to(device), got)
    assert torch.equal(got.cpu(), want.cpu()) and torch.equal(got[5].cpu(), torch.zeros_like(got[5].cpu()))
