"""rope_and_store_kv: the fused kernel equals apply_rope then store_kv (its reference)."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.kv_quant import INT8_SCALE_BYTES, dequantize_kv, int8_scales
from kvspill.kernels.rope_store import rope_and_store_kv, rope_and_store_kv_ref


@pytest.mark.parametrize(
    "dtype, num_heads, num_kv_heads, head_dim, block_size, cache_dtype",
    [
        (torch.float32, 4, 2, 16, 8, None),
        (torch.bfloat16, 6, 3, 32, 16, None),
        (torch.bfloat16, 32, 8, 64, 16, None),
        (torch.float32, 4, 2, 16, 8, torch.float8_e4m3fn),  # --kv-cache-dtype fp8
        (torch.bfloat16, 6, 3, 32, 16, torch.float8_e5m2),
        (torch.float32, 4, 2, 16, 8, torch.int8),  # --kv-cache-dtype int8: value and scale planes
        (torch.bfloat16, 6, 3, 32, 16, torch.int8),
    ],
)
def test_rope_and_store_matches_reference(
    dtype, num_heads, num_kv_heads, head_dim, block_size, cache_dtype, device
):
    gen = torch.Generator().manual_seed(0)
    num_blocks, num_layers, layer, num_tokens, max_pos = 6, 3, 1, 11, 300
    row = head_dim + INT8_SCALE_BYTES if cache_dtype == torch.int8 else head_dim
    cache = torch.randn((num_blocks, num_layers, 2, block_size, num_kv_heads, row), generator=gen)
    cache = cache.to(cache_dtype or dtype).to(device)
    # q, k and v as strided slices of one fused qkv output, as the model produces them.
    qkv = (
        torch.randn((num_tokens, num_heads + 2 * num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    )
    angles = torch.rand((max_pos, head_dim // 2), generator=gen) * 6.28
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1).to(device)
    positions = torch.randint(0, max_pos, (num_tokens,), generator=gen).to(device)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[[2, 7]] = -1  # padding tokens
    slots = slots.to(device)

    results = []
    for fn in (rope_and_store_kv_ref, rope_and_store_kv):
        x, c = qkv.clone(), cache.clone()
        q, k, v = (
            x[:, :num_heads],
            x[:, num_heads : num_heads + num_kv_heads],
            x[:, num_heads + num_kv_heads :],
        )
        fn(q, k, v, positions, cos_sin, c[:, layer], slots)
        results.append((x, c))
    (x_ref, c_ref), (x_kernel, c_kernel) = results
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(x_kernel, x_ref, **tol)  # q and k rotated in place, v untouched
    if cache_dtype == torch.int8:  # the same rows; a GPU's rotation may move a value one step
        # (untouched rows keep the random bytes, whose "scales" may be NaN); bf16: the rotated k
        # itself may differ by one bf16 step (2^-8), and with it the row's scale
        scale = int8_scales(c_ref)
        rtol, steps = (1e-5, 1.001) if dtype == torch.float32 else (2.0**-7, 2.0)
        torch.testing.assert_close(int8_scales(c_kernel), scale, rtol=rtol, atol=0, equal_nan=True)
        diff = (dequantize_kv(c_kernel) - dequantize_kv(c_ref)).abs().nan_to_num(0.0)
        assert (diff <= scale.nan_to_num(0.0)[..., None].abs() * steps).all()
        assert not torch.equal(c_ref, cache)
        return
    if cache_dtype is not None:  # k rotated in fp32 either way; a value may round to the next fp8
        tol = dict(rtol=2.0 ** -(3 if cache_dtype == torch.float8_e4m3fn else 2), atol=0.02)
        c_kernel, c_ref, cache = c_kernel.float(), c_ref.float(), cache.float()
    torch.testing.assert_close(c_kernel, c_ref, **tol)  # other layers and padding slots untouched
    assert not torch.equal(c_ref, cache)


def test_rope_and_store_rejects_mismatches(device):
    q = torch.zeros((3, 4, 16), device=device)
    k = v = torch.zeros((3, 2, 16), device=device)
    cache = torch.zeros((2, 2, 8, 2, 16), device=device)
    cos_sin = torch.zeros((10, 16), device=device)
    positions = torch.zeros(3, dtype=torch.int64, device=device)
    with pytest.raises(AssertionError, match="slot_mapping"):
        rope_and_store_kv(
            q, k, v, positions, cos_sin, cache, torch.zeros(2, dtype=torch.int64, device=device)
        )
    with pytest.raises(AssertionError, match="cos_sin_cache"):
        rope_and_store_kv(
            q, k, v, positions, cos_sin[:, :8], cache, torch.zeros(3, dtype=torch.int64, device=device)
        )
