"""store_kv: kernel vs reference vs a per-token loop, on a strided view of a multi-layer cache."""

from __future__ import annotations

import pytest
import torch

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
