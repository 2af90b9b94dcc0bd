"""store_kv: kernel vs reference vs a per-token loop, on a strided view of a multi-layer cache."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.kv_quant import INT8_SCALE_BYTES, dequantize_kv, int8_scales
from kvspill.kernels.store_kv import store_kv, store_kv_ref


def _store_loop(k, v, kv_layer, slot_mapping) -> None:
    """The obvious per-token loop the reference must agree with."""
    block_size = kv_layer.shape[2]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            kv_layer[slot // block_size, 0, slot % block_size] = k[t]
            kv_layer[slot // block_size, 1, slot % block_size] = v[t]


@pytest.mark.parametrize(
    "dtype, num_kv_heads, head_dim, block_size",
    [
        (torch.float32, 2, 16, 8),
        (torch.float16, 3, 32, 16),
        (torch.bfloat16, 1, 64, 16),
        (torch.bfloat16, 8, 128, 32),
    ],
)
def test_store_kv_matches_reference(dtype, num_kv_heads, head_dim, block_size, device):
    gen = torch.Generator().manual_seed(0)
    num_blocks, num_layers, layer, num_tokens = 6, 3, 1, 11
    cache = torch.randn((num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim), generator=gen)
    cache = cache.to(dtype).to(device)
    # k and v as strided slices of one fused qkv output, as the model produces them.
    qkv = torch.randn((num_tokens, 4 + 2 * num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    k, v = qkv[:, 4 : 4 + num_kv_heads], qkv[:, 4 + num_kv_heads :]
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[[2, 7]] = -1  # padding tokens
    slots = slots.to(device)

    expected = cache.clone()
    _store_loop(k, v, expected[:, layer], slots)
    by_ref = cache.clone()
    store_kv_ref(k, v, by_ref[:, layer], slots)
    by_kernel = cache.clone()
    store_kv(k, v, by_kernel[:, layer], slots)

    assert torch.equal(by_ref, expected)
    assert torch.equal(by_kernel, expected)  # other layers and unaddressed slots untouched too


def test_store_kv_empty_and_all_padding(device):
    cache = torch.zeros((2, 2, 2, 8, 1, 16), device=device)
    k = torch.ones((3, 1, 16), device=device)
    store_kv(k, k, cache[:, 0], torch.full((3,), -1, dtype=torch.int64, device=device))
    store_kv(k[:0], k[:0], cache[:, 0], torch.empty(0, dtype=torch.int64, device=device))
    assert not cache.any()


def test_store_kv_rejects_mismatches(device):
    cache = torch.zeros((2, 2, 2, 8, 2, 16), device=device)
    k = torch.ones((3, 2, 16), device=device)
    with pytest.raises(AssertionError, match="slot_mapping"):
        store_kv(k, k, cache[:, 0], torch.zeros(3, dtype=torch.int32, device=device))
    with pytest.raises(AssertionError, match="dtypes"):
        store_kv(k.half(), k.half(), cache[:, 0], torch.zeros(3, dtype=torch.int64, device=device))


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_store_kv_into_fp8_cache_rounds_and_saturates(fp8, device):
    """--kv-cache-dtype fp8: the kernel and the reference store the same fp8 values, within
    the format's rounding of the input, and values past its range saturate (no NaN)."""
    gen = torch.Generator().manual_seed(1)
    cache = torch.zeros((4, 2, 2, 8, 2, 32), dtype=fp8, device=device)
    k = (torch.randn((9, 2, 32), generator=gen) * 4).to(torch.bfloat16).to(device)
    v = (torch.randn((9, 2, 32), generator=gen) * 4).to(torch.bfloat16).to(device)
    k[0, 0, :4] = torch.tensor([1e6, -1e6, 0.0, 1e-3])  # beyond e4m3's 448 (and e5m2's 57344)
    slots = torch.randperm(32, generator=gen)[:9].to(device)
    by_ref, by_kernel = cache.clone(), cache.clone()
    store_kv_ref(k, v, by_ref[:, 1], slots)
    store_kv(k, v, by_kernel[:, 1], slots)
    normal = k.float().abs() >= torch.finfo(fp8).smallest_normal  # k: K of each stored token
    got_ref = by_ref[:, 1, 0].reshape(-1, 2, 32)[slots].float()  # [9, 2, 32] K as stored
    got_kernel = by_kernel[:, 1, 0].reshape(-1, 2, 32)[slots].float()
    # fp8 normals: the same value (round to nearest even); subnormals: within one step
    assert torch.equal(got_ref[normal], got_kernel[normal])
    assert ((got_ref - got_kernel).abs()[~normal] <= 2.0 * torch.finfo(fp8).smallest_normal / 8).all()
    assert torch.isfinite(by_kernel.float()).all() and torch.isfinite(by_ref.float()).all()
    limit = torch.finfo(fp8).max
    assert got_kernel[0, 0, 0] == limit and got_kernel[0, 0, 1] == -limit
    mantissa_bits = {torch.float8_e4m3fn: 3, torch.float8_e5m2: 2}[fp8]
    inside = normal & (k.float().abs() <= limit)
    err = (got_ref - k.float()).abs()[inside]
    assert (err <= k.float().abs()[inside] * 2.0 ** -(mantissa_bits + 1)).all()  # half an ulp


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kv_into_int8_cache_equals_reference_and_bound(dtype, device):
    """--kv-cache-dtype int8: kernel and reference store the same int8 rows and scales (equal
    under the interpreter; within one quantization step on a GPU, whose division may round
    differently), every element within half a step of its input, a zero row with scale 0."""
    gen = torch.Generator().manual_seed(2)
    num_kv_heads, head_dim = 3, 32
    cache = torch.zeros(
        (4, 2, 2, 8, num_kv_heads, head_dim + INT8_SCALE_BYTES), dtype=torch.int8, device=device
    )
    k = (torch.randn((9, num_kv_heads, head_dim), generator=gen) * 3).to(dtype).to(device)
    v = (torch.randn((9, num_kv_heads, head_dim), generator=gen) * 0.01).to(dtype).to(device)
    k[4, 1] = 0.0
    slots = torch.randperm(32, generator=gen)[:9].to(device)
    by_ref, by_kernel = cache.clone(), cache.clone()
    store_kv_ref(k, v, by_ref[:, 1], slots)
    store_kv(k, v, by_kernel[:, 1], slots)
    assert torch.equal(by_ref[:, 0], cache[:, 0]) and torch.equal(
        by_kernel[:, 0], cache[:, 0]
    )  # layer 0 untouched
    if device == "cpu":
        assert torch.equal(by_ref, by_kernel)
    deq = {name: dequantize_kv(c[:, 1]) for name, c in (("ref", by_ref), ("kernel", by_kernel))}
    scales = {name: int8_scales(c[:, 1]) for name, c in (("ref", by_ref), ("kernel", by_kernel))}
    for kv, x in ((0, k), (1, v)):
        scale = scales["ref"][:, kv].reshape(-1, num_kv_heads)[slots]
        torch.testing.assert_close(
            scales["kernel"][:, kv].reshape(-1, num_kv_heads)[slots], scale, rtol=1e-6, atol=0
        )
        deq_ref, deq_kernel = (
            deq[name][:, kv].reshape(-1, num_kv_heads, head_dim)[slots] for name in ("ref", "kernel")
        )
        assert ((deq_ref - deq_kernel).abs() <= scale[..., None] * 1.001).all()
        assert ((deq_ref - x.float()).abs() <= scale[..., None] * 0.5 * (1 + 1e-5) + 1e-30).all()
    assert scales["kernel"][:, 0].reshape(-1, num_kv_heads)[slots[4], 1] == 0
