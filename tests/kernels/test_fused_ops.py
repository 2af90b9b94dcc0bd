"""Fused ops: references vs Hugging Face Llama's formulas in float64, kernels vs references."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.fused_ops import (
    apply_rope,
    apply_rope_ref,
    rms_norm,
    rms_norm_ref,
    silu_and_mul,
    silu_and_mul_ref,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(*shape, dtype, device, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


def test_rms_norm_reference_matches_formula(device):
    x = _randn(4, 48, dtype=torch.float32, device=device)
    w = _randn(48, dtype=torch.float32, device=device, seed=1)
    expected = w.double() * x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms_norm_ref(x, w, 1e-6).double(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden_size", [64, 96, 1000])
def test_rms_norm_kernel_matches_reference(tol, dtype, hidden_size, device):
    x = _randn(5, hidden_size, dtype=dtype, device=device)
    w = _randn(hidden_size, dtype=dtype, device=device, seed=1)
    torch.testing.assert_close(rms_norm(x, w, 1e-5).float(), rms_norm_ref(x, w, 1e-5).float(), **tol[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_with_residual(tol, dtype, device):
    x = _randn(6, 80, dtype=dtype, device=device)
    w = _randn(80, dtype=dtype, device=device, seed=1)
    residual = _randn(6, 80, dtype=dtype, device=device, seed=2)
    x_before = x.clone()
    expected_residual = x + residual
    res_ref, res_kernel = residual.clone(), residual.clone()
    out_ref, new_ref = rms_norm_ref(x, w, 1e-5, res_ref)
    out, new = rms_norm(x, w, 1e-5, res_kernel)
    assert new is res_kernel and new_ref is res_ref, "the residual is updated in place"
    assert torch.equal(x, x_before)
    torch.testing.assert_close(new_ref, expected_residual, atol=0, rtol=0)
    # 1 ulp: Triton's interpreter truncates fp32 -> bf16 where torch rounds to nearest.
    torch.testing.assert_close(new, expected_residual, atol=0, rtol=2**-7)
    torch.testing.assert_close(out_ref, rms_norm_ref(expected_residual, w, 1e-5))
    torch.testing.assert_close(out.float(), out_ref.float(), **tol[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter_size", [32, 200])
def test_silu_and_mul(tol, dtype, inter_size, device):
    x = _randn(3, 2 * inter_size, dtype=dtype, device=device) * 3
    gate, up = x.double().chunk(2, -1)
    expected = gate / (1 + torch.exp(-gate)) * up
    torch.testing.assert_close(silu_and_mul_ref(x).double(), expected, **tol[dtype])
    torch.testing.assert_close(silu_and_mul(x).float(), silu_and_mul_ref(x).float(), **tol[dtype])


def _cos_sin_cache(max_positions: int, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float()  # [max_positions, head_dim]


def _hf_rope(x: torch.Tensor, positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb in float64: cos/sin duplicated across the halves."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=x.device) / head_dim)
    emb = torch.cat([positions.double()[:, None] * inv_freq] * 2, dim=-1)[:, None, :]
    x = x.double()
    rotate_half = torch.cat((-x[..., head_dim // 2 :], x[..., : head_dim // 2]), dim=-1)
    return x * emb.cos() + rotate_half * emb.sin()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_heads, num_kv_heads, head_dim", [(4, 2, 16), (6, 1, 64), (8, 8, 128)])
def test_rope(tol, dtype, num_heads, num_kv_heads, head_dim, device):
    num_tokens, max_positions = 5, 300
    # q and k as strided views of one fused qkv output: rotated in place.
    qkv = _randn(num_tokens, num_heads + 2 * num_kv_heads, head_dim, dtype=dtype, device=device)
    positions = torch.tensor([0, 1, 17, 299, 17], dtype=torch.int64, device=device)
    cache = _cos_sin_cache(max_positions, head_dim).to(device)
    q0, k0 = qkv[:, :num_heads].clone(), qkv[:, num_heads : num_heads + num_kv_heads].clone()
    v0 = qkv[:, num_heads + num_kv_heads :].clone()

    q_ref, k_ref = apply_rope_ref(q0.clone(), k0.clone(), positions, cache)
    torch.testing.assert_close(q_ref.double(), _hf_rope(q0, positions, head_dim), **tol[dtype])
    torch.testing.assert_close(k_ref.double(), _hf_rope(k0, positions, head_dim), **tol[dtype])

    q, k = qkv[:, :num_heads], qkv[:, num_heads : num_heads + num_kv_heads]
    q_out, k_out = apply_rope(q, k, positions, cache)
    assert q_out.data_ptr() == q.data_ptr() and k_out.data_ptr() == k.data_ptr()
    torch.testing.assert_close(qkv[:, :num_heads].float(), q_ref.float(), **tol[dtype])
    torch.testing.assert_close(
        qkv[:, num_heads : num_heads + num_kv_heads].float(), k_ref.float(), **tol[dtype]
    )
    assert torch.equal(qkv[:, num_heads + num_kv_heads :], v0), "v must be untouched"
