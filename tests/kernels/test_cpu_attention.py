"""The C++ CPU attention kernel against the gather-and-softmax reference: ragged parts, GQA,
every KV dtype, both code paths (AVX-512 for head_dim % 16 == 0, portable otherwise), and the
fallback when no compiler is present."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from kvspill.kernels import cpu_build
from kvspill.kernels.cpu_attention import (
    CpuParts,
    KVScales,
    cpu_paged_attention,
    cpu_paged_attention_ref,
    load_kernel,
)
from kvspill.kernels.kv_quant import dequantize_kv, quantize_kv

pytestmark = pytest.mark.skipif(load_kernel() is None, reason="no C++ compiler to build the CPU kernel")


def random_parts(
    rng: np.random.Generator, num_blocks: int, blocks_per_part: list[int], tokens: list[int]
) -> CpuParts:
    """Parts with the given block counts (0 allowed), distinct random block ids, consecutive rows."""
    ids = rng.permutation(num_blocks)[: sum(blocks_per_part)].astype(np.int64)
    rows = np.cumsum([0, *tokens])
    return CpuParts(ids, np.cumsum([0, *blocks_per_part]), rows[:-1].copy(), rows[1:].copy())


def run_both(q, pool, layer, parts, scales=None, threads=2):
    num_rows, num_heads, head_dim = q.shape
    out = (torch.full((num_rows, num_heads, head_dim), 7.0), torch.full((num_rows, num_heads), 7.0))
    ref = (out[0].clone(), out[1].clone())
    cpu_paged_attention(q, pool, layer, parts, 0.3, out, num_threads=threads, scales=scales)
    cpu_paged_attention_ref(q, pool, layer, parts, 0.3, ref, scales=scales)
    return out, ref


def assert_close(out, ref, atol=2e-5):
    torch.testing.assert_close(out[0], ref[0], atol=atol, rtol=1e-4)
    torch.testing.assert_close(out[1], ref[1], atol=atol, rtol=1e-4)  # -inf rows (no keys) match too


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "block_size,num_kv_heads,group,head_dim",
    # head_dim 24: the portable path; block size 7: odd
    [(16, 2, 4, 64), (4, 3, 3, 32), (16, 1, 1, 128), (5, 2, 2, 24), (7, 2, 4, 64)],
)
def test_matches_reference_ragged_gqa(dtype, block_size, num_kv_heads, group, head_dim):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    num_layers, num_blocks = 3, 60
    pool = torch.randn(num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim).to(dtype)
    pool[:, 1] = float("nan")  # never attended: a read past layer 0's slabs shows up
    tokens = [1, 3, 2, 1, 5]  # decodes and prefill chunks; rows of a part see all its keys
    parts = random_parts(rng, num_blocks, [7, 1, 0, 23, 11], tokens)
    q = torch.randn(sum(tokens), num_kv_heads * group, head_dim).to(dtype)
    for layer in (0, 2):
        for threads in (1, 3):
            out, ref = run_both(q, pool, layer, parts, threads=threads)
            assert_close(out, ref)
    assert torch.isneginf(out[1][4:6]).all() and (out[0][4:6] == 0).all()  # the part with no blocks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("block_size,head_dim", [(16, 64), (7, 24)])  # AVX-512, portable path
def test_partial_last_blocks_read_only_their_keys(dtype, block_size, head_dim):
    """`last_tokens`: a part's last block is read up to its keys, also where the part's blocks
    run as several tasks; the unfilled slots (NaN here) are never read."""
    rng = np.random.default_rng(2)
    torch.manual_seed(2)
    num_blocks, blocks = 80, [1, 3, 0, 40, 9]
    values = torch.randn(num_blocks, 1, 2, block_size, 2, head_dim)
    parts = random_parts(rng, num_blocks, blocks, [1, 2, 1, 1, 3])
    last = np.array([1, block_size - 1, block_size, 2, block_size], dtype=np.int64)
    parts = CpuParts(parts.block_ids, parts.block_start, parts.row_start, parts.row_end, last)
    for p, n in enumerate(blocks):
        if n and dtype != torch.int8:
            values[parts.block_ids[parts.block_start[p + 1] - 1], :, :, last[p] :] = float("nan")
    pool = quantize_kv(values, dtype).contiguous()
    q = torch.randn(8, 6, head_dim)
    out, ref = run_both(q, pool, 0, parts, threads=3)
    assert_close(out, ref)
    assert not torch.isnan(out[0]).any()
    with pytest.raises(ValueError, match="last_tokens must lie in 1 .. block_size"):
        bad = CpuParts(parts.block_ids, parts.block_start, parts.row_start, parts.row_end, last + block_size)
        cpu_paged_attention(q, pool, 0, bad, 0.3, (torch.empty(8, 6, head_dim), torch.empty(8, 6)))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_pool_with_layer_scales(dtype):
    rng = np.random.default_rng(1)
    pool = (torch.randn(40, 2, 2, 16, 2, 64) * 3).to(dtype)
    scales = KVScales(layer_scales=torch.tensor([[0.5, 2.0], [0.25, 4.0]]))
    parts = random_parts(rng, 40, [9, 13], [1, 2])
    q = torch.randn(3, 8, 64)
    out, ref = run_both(q, pool, 1, parts, scales)
    assert_close(out, ref)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_every_code_converts_exactly(dtype):
    """Every finite fp8 code, subnormals included (the kernel widens e4m3 through fp16 to keep
    them off fp32's slow denormal path), gives the reference's values: one-hot queries read the
    keys' values back through the scores, uniform ones the values through o."""
    codes = torch.arange(256, dtype=torch.uint8).view(dtype)
    finite = codes[torch.isfinite(codes.float())]
    n = len(finite) // 16 * 16
    pool = finite[:n].reshape(-1, 1, 1, 16, 1, 1).expand(-1, 1, 2, 16, 1, 16).contiguous()
    parts = CpuParts.single(np.arange(pool.shape[0]), 0, 2)
    q = torch.zeros(2, 1, 16)
    q[0, 0, 0] = 1.0
    out, ref = run_both(q, pool, 0, parts, KVScales(layer_scales=torch.tensor([[1e-3, 3.0]])))
    assert_close(out, ref)


@pytest.mark.parametrize("head_dim", [32, 24])  # 24: the portable path (no AVX-512 multiple of 16)
def test_int8_pool_reads_the_scale_plane_of_its_blocks(head_dim):
    """--kv-cache-dtype int8: blocks of head_dim-byte value rows, then their fp32 scales
    (kv_quant.int8_planes); the kernel equals the reference on the dequantized values, in the
    layer asked for."""
    rng = np.random.default_rng(2)
    pool = quantize_kv(torch.randn(30, 2, 2, 16, 2, head_dim) * 3, torch.int8)
    parts = random_parts(rng, 30, [5, 12], [2, 1])
    q = torch.randn(3, 4, head_dim)
    for layer in (0, 1):
        out, ref = run_both(q, pool, layer, parts)
        assert_close(out, ref)
    o_want, lse_want = torch.zeros(3, 4, head_dim), torch.full((3, 4), float("-inf"))
    cpu_paged_attention_ref(q, dequantize_kv(pool), 1, parts, 0.3, (o_want, lse_want))
    assert_close(out, (o_want, lse_want))


def test_no_compiler_falls_back_with_one_clear_warning(monkeypatch, caplog):
    monkeypatch.setattr(cpu_build.shutil, "which", lambda name: None)
    load_kernel.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="kvspill.kernels.cpu_attention"):
            assert load_kernel() is None
            assert load_kernel() is None
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1 and "install g++" in warnings[0]
    finally:
        load_kernel.cache_clear()
