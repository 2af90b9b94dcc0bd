"""The CPU decode ops kernel (RMSNorm with its residual add, RoPE in place, the K/V store) against
the torch references it replaces: RoPE and the store bit for bit in every dtype (special values
included), RMSNorm to the last bit of an output; strided views, a layer of a multi-layer pool, bad
positions and slots refused, and the torch path where the kernel does not apply."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from kvspill.kernels import cpu_decode_ops
from kvspill.kernels.cpu_decode_ops import add_rms_norm, load_kernel, rope_in_place, store_kv
from kvspill.kernels.store_kv import store_kv_ref
from kvspill.model.layers import RMSNorm, RotaryEmbedding, apply_rotary_ref, rms_norm_ref

pytestmark = pytest.mark.skipif(load_kernel() is None, reason="no C++ compiler to build the CPU kernel")

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def special_values() -> torch.Tensor:
    """Values across every binade of fp16 and bf16, their rounding boundaries and the specials."""
    torch.manual_seed(0)
    scales = (1e-9, 1e-7, 6e-6, 1e-4, 1e-2, 1.0, 100.0, 1e4, 6e4, 1e38)
    edges = [65504.0, 65519.0, 65520.0, 5.96e-8, 2.98e-8, 2.99e-8, 6.1e-5, 0.0, -0.0]
    edges += [float("inf"), float("-inf"), float("nan"), 3.4e38, 1.0 + 2.0**-11, 1.0 + 2.0**-8]
    values = torch.cat([torch.randn(4096) * s for s in scales] + [torch.tensor(edges), -torch.tensor(edges)])
    return values[: values.numel() // 64 * 64]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


@pytest.mark.parametrize("pool_dtype", DTYPES)
@pytest.mark.parametrize("src_dtype", DTYPES)
def test_store_rounds_as_the_reference(src_dtype: torch.dtype, pool_dtype: torch.dtype) -> None:
    x = special_values().to(src_dtype).view(-1, 2, 32)
    slots = torch.randperm(x.shape[0] + 40)[: x.shape[0]]  # scattered, some blocks untouched
    slots[::7] = -1  # padding: skipped
    pool = torch.full((-(-(x.shape[0] + 40) // 16), 2, 16, 2, 32), 3.0, dtype=pool_dtype)
    ref = pool.clone()
    assert store_kv(x, x.flip(0), pool, slots)
    store_kv_ref(x, x.flip(0), ref, slots)
    same = (bits(pool) == bits(ref)) | (pool.isnan() & ref.isnan())  # NaN payloads may differ
    assert bool(same.all())


def test_store_into_one_layer_of_a_pool_from_strided_rows() -> None:
    qkv = torch.randn(3, 7 * 64, dtype=torch.float16)
    _, k, v = qkv.split([3 * 64, 2 * 64, 2 * 64], dim=-1)
    k, v = k.view(3, 2, 64), v.view(3, 2, 64)
    pools = torch.zeros(5, 4, 2, 16, 2, 64, dtype=torch.float16)  # [blocks, layers, 2, slots, heads, dim]
    ref = pools.clone()
    slots = torch.tensor([17, -1, 79])
    assert store_kv(k, v, pools[:, 2], slots)
    store_kv_ref(k, v, ref[:, 2], slots)
    assert torch.equal(pools, ref)
    assert pools[:, :2].abs().sum() == 0 and pools[:, 3:].abs().sum() == 0


def test_store_refuses_a_slot_past_the_pool_and_leaves_other_formats_to_torch() -> None:
    k = torch.randn(2, 2, 64, dtype=torch.float16)
    pool = torch.zeros(2, 2, 16, 2, 64, dtype=torch.float16)
    with pytest.raises(IndexError, match="past the pool"):
        store_kv(k, k, pool, torch.tensor([3, 32]))
    assert pool.abs().sum() == 0  # checked before anything is written
    for dtype in (torch.int8, torch.float8_e4m3fn):
        assert not store_kv(k, k, torch.zeros(2, 2, 16, 2, 64, dtype=dtype), torch.tensor([0, 1]))
    assert not store_kv(k, k, pool, torch.tensor([0, 1], dtype=torch.int32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 3, 40])
def test_rope_equals_the_models_rotation(dtype: torch.dtype, tokens: int) -> None:
    torch.manual_seed(tokens)
    qkv = (torch.randn(tokens, 15 * 64) * 4).to(dtype)  # q, k as the model's views of qkv
    q, k, _ = qkv.split([9 * 64, 3 * 64, 3 * 64], dim=-1)
    q, k = q.view(tokens, 9, 64), k.view(tokens, 3, 64)
    cos_sin = torch.randn(4096, 64)
    positions = torch.randint(0, 4096, (tokens,))
    ref_q, ref_k = apply_rotary_ref(positions, q.clone(), k.clone(), cos_sin)
    out_q, out_k = rope_in_place(positions, q, k, cos_sin) or (None, None)
    assert out_q is q and out_k is k  # in place
    assert torch.equal(bits(q), bits(ref_q)) and torch.equal(bits(k), bits(ref_k))


def test_rope_refuses_a_position_outside_its_table() -> None:
    q, k = torch.randn(2, 4, 64), torch.randn(2, 2, 64)
    before = q.clone()
    with pytest.raises(IndexError, match="outside the table"):
        rope_in_place(torch.tensor([3, 100]), q, k, torch.randn(100, 64))
    assert torch.equal(q, before)
    assert rope_in_place(torch.tensor([3, 4], dtype=torch.int32), q, k, torch.randn(100, 64)) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 7, 40])
def test_rms_norm_with_its_residual_add(dtype: torch.dtype, rows: int) -> None:
    torch.manual_seed(rows)
    x, residual = (torch.randn(rows, 576) * 3).to(dtype), torch.randn(rows, 576).to(dtype)
    weight = torch.randn(576).to(dtype)
    done = add_rms_norm(x, residual, weight, 1e-5)
    assert done is not None and done[1] is not None
    out, added = done
    assert torch.equal(added, x + residual)  # the residual stream exactly as the reference adds it
    ref = rms_norm_ref(x + residual, weight, 1e-5)
    assert out.dtype == ref.dtype
    # only the sum of squares' order differs: the last bit or two (two roundings follow it); in
    # fp16 / bf16 of a few outputs, in fp32 of whole rows (RMSNorm keeps torch's ops for fp32)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(out.float(), ref.float(), rtol=2 * eps, atol=1e-3 * eps)
    if dtype != torch.float32:
        assert int((out != ref).sum()) <= max(8, out.numel() // 10)
    alone = add_rms_norm(x, None, weight, 1e-5)
    assert alone is not None and alone[1] is None
    torch.testing.assert_close(alone[0], rms_norm_ref(x, weight, 1e-5))


def test_rms_norm_widens_to_an_fp32_weight() -> None:
    x, weight = torch.randn(3, 64, dtype=torch.float16), torch.randn(64)
    done = add_rms_norm(x, None, weight, 1e-6)
    assert done is not None
    assert done[0].dtype == torch.float32
    torch.testing.assert_close(done[0], rms_norm_ref(x, weight, 1e-6))


def test_the_modules_take_the_kernel_and_fall_back_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    norm = RMSNorm(64, 1e-5, dtype=torch.float16)
    norm.weight.data.normal_()
    x, residual = torch.randn(5, 2, 64, dtype=torch.float16), torch.randn(5, 2, 64, dtype=torch.float16)
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=256)
    rotary = RotaryEmbedding(config, 64, 256)
    positions = torch.arange(5)
    q, k = torch.randn(5, 4, 64, dtype=torch.float16), torch.randn(5, 2, 64, dtype=torch.float16)

    def run() -> tuple[torch.Tensor, ...]:
        out, added = norm(x, residual)
        rq, rk = rotary(positions, q.clone(), k.clone())
        return out, added, rq, rk

    kernel = run()
    monkeypatch.setattr(cpu_decode_ops, "load_kernel", lambda: None)
    pool = torch.zeros(1, 2, 16, 2, 64, dtype=torch.float16)
    assert add_rms_norm(x[0], None, norm.weight, 1e-5) is None and not store_kv(k, k, pool, positions)
    torch_path = run()
    assert kernel[0].shape == torch_path[0].shape == x.shape
    torch.testing.assert_close(kernel[0], torch_path[0])
    for a, b in zip(kernel[1:], torch_path[1:], strict=True):
        assert torch.equal(a, b)
