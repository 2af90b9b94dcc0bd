"""Stored keys turned back by a position delta (kernels/rope_shift.py) against RoPE applied at the
new positions directly, in every KV format; V untouched; a shared source copied, not changed."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.kv_quant import dequantize_kv, hadamard, row_dim, store_rows
from kvspill.kernels.rope_shift import shift_cos_sin, shift_keys, shift_keys_ref
from kvspill.model.layers import build_cos_sin_cache

NUM_BLOCKS, BLOCK, HEADS, DIM = 6, 4, 2, 16


def rope_table(scaled: bool) -> torch.Tensor:
    from transformers import LlamaConfig

    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16} if scaled else None
    config = LlamaConfig(
        hidden_size=HEADS * DIM, num_attention_heads=HEADS, max_position_embeddings=64, rope_scaling=scaling
    )
    return build_cos_sin_cache(config, 64)


def roped(k0: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """k0 [n, heads, dim] with RoPE at `positions` (neox halves), fp32."""
    half = DIM // 2
    cos, sin = table[positions, None, :half], table[positions, None, half:]
    k1, k2 = k0[..., :half], k0[..., half:]
    return torch.cat((k1 * cos - k2 * sin, k2 * cos + k1 * sin), dim=-1)


def pool_with(
    k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype, basis: torch.Tensor | None
) -> torch.Tensor:
    """A pool [blocks, 2, block, heads, row] holding rows k, v (fp32 [NUM_BLOCKS * BLOCK, heads, dim])."""
    pool = torch.zeros(NUM_BLOCKS, 2, BLOCK, HEADS, row_dim(DIM, dtype), dtype=dtype)
    slots = torch.arange(NUM_BLOCKS * BLOCK)
    for plane, x in ((0, k), (1, v)):
        x = x @ basis if basis is not None else x
        store_rows(pool, (slots // BLOCK, plane, slots % BLOCK), x)
    return pool


def read(pool: torch.Tensor, plane: int, basis: torch.Tensor | None) -> torch.Tensor:
    x = dequantize_kv(pool)[:, plane].reshape(NUM_BLOCKS * BLOCK, HEADS, DIM)
    return x @ basis if basis is not None else x


# (pool dtype, max abs error against keys roped at the new positions, of values about +-2)
FORMATS = [
    (torch.float32, 1e-5),
    (torch.bfloat16, 0.03),
    (torch.float16, 4e-3),
    (torch.float8_e4m3fn, 0.3),
    (torch.int8, 0.06),
]


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "yarn"])
@pytest.mark.parametrize(("dtype", "tol"), FORMATS, ids=lambda x: str(x).split(".")[-1])
def test_keys_turn_to_their_new_positions(dtype: torch.dtype, tol: float, scaled: bool) -> None:
    torch.manual_seed(0)
    table = rope_table(scaled)
    delta = 12
    n = NUM_BLOCKS * BLOCK
    positions = torch.arange(n) + 20  # where the keys were stored
    k0, v = torch.randn(n, HEADS, DIM), torch.randn(n, HEADS, DIM)
    basis = hadamard(DIM) if dtype == torch.int8 else None
    pool = pool_with(roped(k0, positions, table), v, dtype, basis)
    v_before = read(pool, 1, None)  # int8: a row view of a block region is not its V plane
    slots = torch.arange(4, n)  # the first block stays (sinks)
    shift_keys(pool, slots, slots, shift_cos_sin(table, delta), basis)
    got = read(pool, 0, basis)
    want = roped(k0, positions - delta, table)
    assert (got[4:] - want[4:]).abs().max() < tol
    untouched = pool_with(roped(k0, positions, table), v, dtype, basis)
    assert torch.equal(read(pool, 0, None)[:4], read(untouched, 0, None)[:4])
    assert torch.equal(read(pool, 1, None), v_before)


def test_reference_by_another_road_agrees() -> None:
    torch.manual_seed(1)
    table = rope_table(scaled=True)
    k0 = torch.randn(8, HEADS, DIM)
    positions = torch.arange(8) + 30
    stored = roped(k0, positions, table)
    pool = pool_with(torch.cat([stored] * 3), torch.zeros(24, HEADS, DIM), torch.float32, None)
    slots = torch.arange(8)
    shift_keys(pool, slots, slots, shift_cos_sin(table, 7), None)
    ref = shift_keys_ref(stored, positions, 7, table)
    assert (read(pool, 0, None)[:8] - ref).abs().max() < 1e-5
    assert (ref - roped(k0, positions - 7, table)).abs().max() < 1e-5


def test_copy_on_write_leaves_the_source() -> None:
    torch.manual_seed(2)
    table = rope_table(scaled=False)
    k0, positions = torch.randn(24, HEADS, DIM), torch.arange(24) + 8
    pool = pool_with(roped(k0, positions, table), torch.zeros(24, HEADS, DIM), torch.float32, None)
    before = pool.clone()
    src, dst = torch.arange(4, 8), torch.arange(16, 20)  # block 1 into block 4
    shift_keys(pool, src, dst, shift_cos_sin(table, 8), None)
    assert torch.equal(pool[1], before[1])
    want = roped(k0[4:8], positions[4:8] - 8, table)
    assert (read(pool, 0, None)[16:20] - want).abs().max() < 1e-5
