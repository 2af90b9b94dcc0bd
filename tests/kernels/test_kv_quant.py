"""The int8 KV block layout (kernels/kv_quant.py): a value plane, then a scale plane, per block
region of one layer; what every reader and writer addresses."""

import torch

from kvspill.kernels.kv_quant import (
    INT8_SCALE_BYTES,
    dequantize_kv,
    int8_planes,
    kv_strides,
    quantize_kv,
    store_rows,
    stored_values,
)


def test_int8_block_region_is_a_value_plane_then_a_scale_plane():
    block_size, heads, head_dim = 4, 2, 16
    gen = torch.Generator().manual_seed(0)
    # [blocks, layers, K/V, slots, heads, dim]
    x = torch.randn(3, 2, 2, block_size, heads, head_dim, generator=gen)
    pool = quantize_kv(x, torch.int8)
    assert pool.shape == (3, 2, 2, block_size, heads, head_dim + INT8_SCALE_BYTES)
    region = pool[1, 0].flatten()  # block 1, layer 0: raw bytes
    n_values = 2 * block_size * heads * head_dim
    raw_values = region[:n_values].view(2, block_size, heads, head_dim)
    raw_scales = region[n_values:].view(torch.float32).view(2, block_size, heads)
    want = x[1, 0].float().abs().amax(-1) / 127
    assert torch.equal(raw_scales, want)
    assert torch.equal(raw_values, torch.round(x[1, 0] / want[..., None]).to(torch.int8))
    values, scales = int8_planes(pool[:, 0])
    assert torch.equal(values[1], raw_values) and torch.equal(scales[1], raw_scales)
    err = (dequantize_kv(pool) - x).abs()
    # half a step, plus fp32's rounding of x / s and of q * s (|x| <= 127 s: 2 ulps of 127 s),
    # which a value just off a half step showed (an unseeded run failed by that much)
    assert (err <= int8_planes(pool)[1][..., None] * (0.5 + 127 * 2**-22)).all()


def test_int8_value_rows_are_16_byte_aligned_for_the_kernels():
    """The kernels' strides of an int8 layer view address the value plane: every row starts at a
    multiple of head_dim (>= 16) bytes, unlike the head_dim + 4 rows of the row layout."""
    pool = torch.zeros(5, 3, 2, 16, 8, 128 + INT8_SCALE_BYTES, dtype=torch.int8)
    strides = kv_strides(pool[:, 2])
    assert strides == (3 * 2 * 16 * 8 * 132, 16 * 8 * 128, 8 * 128, 128)
    assert all(s % 16 == 0 for s in strides)
    assert kv_strides(torch.zeros(5, 2, 16, 8, 128)) == (2 * 16 * 8 * 128, 16 * 8 * 128, 8 * 128, 128)


def test_store_rows_writes_one_row_and_its_scale_only():
    pool = torch.zeros(2, 2, 2, 4, 2, 8 + INT8_SCALE_BYTES, dtype=torch.int8)  # [blocks, layers, ...]
    layer = pool[:, 1]
    row = torch.randn(1, 2, 8)
    store_rows(layer, (torch.tensor([1]), 1, torch.tensor([3])), row)
    deq = dequantize_kv(pool)
    assert torch.equal(deq[1, 1, 1, 3], stored_values(row[0], torch.int8))
    deq[1, 1, 1, 3] = 0
    assert not deq.any()  # nothing else was written (layer 0, other blocks, slots, K)
