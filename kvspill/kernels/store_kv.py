"""Write new tokens' K and V into the paged KV cache (vLLM's reshape_and_cache).

Layout of the whole cache, fixed for all tiers:
    kv_cache: [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]   (dim 2: 0 = K, 1 = V)
so one block of all layers is contiguous. Kernels see one layer's view
    kv_layer = kv_cache[:, layer]: [num_blocks, 2, block_size, num_kv_heads, head_dim]
whose block stride is num_layers times larger than a contiguous tensor's: every stride is passed.

Invariants:
- slot = block_id * block_size + offset; a negative slot is padding and writes nothing.
- Writes are in place; no two tokens of one call may share a slot (the winner is unspecified).
- The cache holds the model dtype or an fp8 format (`kv_quant.py`): fp8 values saturate at the
  format's range when stored (a plain cast would store NaN).
- int8 caches (`kv_quant.py`) have rows of head_dim + 4 elements laid out per block as a value
  plane and a scale plane: each (token, kv head) row is quantized with its own absmax / 127
  scale; the values go to the value plane (`kv_quant.kv_strides`), the scale to the scale plane
  through the fp32 view of the same memory (`kv_quant.scale_view`, `int8_scale_index`).
"""

from __future__ import annotations

import torch

from kvspill.kernels.cpu_decode_ops import store_kv as cpu_store_kv
from kvspill.kernels.kv_quant import FP8_DTYPES, fp8_max, kv_strides, scale_view, store_rows, value_dim
from kvspill.kernels.triton_compat import tl, triton


def store_kv_ref(
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int64, negative = skip
) -> None:
    """Torch reference (the CPU engine's path for fp8 / int8 pools, `store_kv_host`): scatter k, v
    into their slots in place."""
    block_size = kv_layer.shape[2]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    block_ids = torch.div(slots, block_size, rounding_mode="floor")
    offsets = slots - block_ids * block_size
    # Advanced indexing on a view writes through to the multi-layer cache.
    store_rows(kv_layer, (block_ids, 0, offsets), k[keep])
    store_rows(kv_layer, (block_ids, 1, offsets), v[keep])


def store_kv_host(
    k: torch.Tensor, v: torch.Tensor, kv_layer: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """`store_kv_ref`'s contract for a pool in host RAM: one C++ call where the pool is fp32 / fp16
    / bf16 (kernels/cpu_decode_ops.py, the same bytes), the reference otherwise."""
    if not cpu_store_kv(k, v, kv_layer, slot_mapping):
        store_kv_ref(k, v, kv_layer, slot_mapping)


@triton.jit
def saturate_round_fp8(x, FP8_MAX: tl.constexpr):
    """x (fp32) clamped to +-FP8_MAX and rounded to nearest even at the fp8 format's mantissa width
    (3 bits for e4m3, max 448; 2 for e5m2), so the cast that follows is exact for fp8 normals
    whatever rounding the backend's cast uses (Triton's interpreter truncates)."""
    x = tl.minimum(tl.maximum(x, -FP8_MAX), FP8_MAX)
    drop: tl.constexpr = 20 if FP8_MAX < 1000.0 else 21  # 23 - mantissa bits
    bits = x.to(tl.int32, bitcast=True)  # the sign bit never changes: magnitudes stay below 2^31
    bits = (bits + ((1 << (drop - 1)) - 1) + ((bits >> drop) & 1)) & (-(1 << drop))
    return tl.minimum(tl.maximum(bits.to(tl.float32, bitcast=True), -FP8_MAX), FP8_MAX)


@triton.jit
def round_half_even(x):
    """x (fp32, |x| < 2^22) to the nearest integer, ties to even (torch.round): after adding
    1.5 * 2^23 no fraction bits are left, so the fp32 add itself rounds to nearest even."""
    return (x + 12582912.0) - 12582912.0


@triton.jit
def int8_row_scale(absmax):
    """The fp32 scale of rows whose largest magnitude is `absmax` (fp32 [R]): absmax / 127, IEEE
    division as torch's (`kv_quant.quantize_int8_rows`); 0 for a row of zeros."""
    return tl.math.div_rn(absmax, tl.full(absmax.shape, 127.0, tl.float32))


@triton.jit
def int8_quantize(x, scale):
    """x [R, N] fp32 with row scales [R] -> int8 round(x / scale) (0 where the scale is 0)."""
    safe = tl.where(scale > 0, scale, 1.0)
    q = round_half_even(tl.math.div_rn(x, safe[:, None] + tl.zeros_like(x)))
    return tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int8)


@triton.jit
def int8_scale_index(block_ids, in_block, stride_cb, stride_ckv, HEAD_DIM: tl.constexpr):
    """fp32 element index (of `kv_quant.scale_view`) of the scale of the int8 row whose values
    start at block_ids * stride_cb + in_block (`kv_quant.kv_strides`: in_block is a multiple
    of HEAD_DIM, the row's number within its block region). The scale plane follows the region's
    2 * stride_ckv value bytes, one fp32 per row in the same order."""
    return (block_ids * stride_cb + 2 * stride_ckv) // 4 + in_block // HEAD_DIM


@triton.jit
def _store_int8_row(
    cache_ptr,
    scale_ptr,
    block_id,
    in_block,
    dims,
    x,
    mask,
    row_ok,
    stride_cb,
    stride_ckv,
    HEAD_DIM: tl.constexpr,
):
    """Quantize x [R, HEAD_DIM] and write rows at block_id * stride_cb + in_block [R] with their scales."""
    scale = int8_row_scale(tl.max(tl.abs(x), 1))
    row_off = block_id * stride_cb + in_block
    tl.store(cache_ptr + row_off[:, None] + dims[None, :], int8_quantize(x, scale), mask=mask)
    tl.store(
        scale_ptr + int8_scale_index(block_id, in_block, stride_cb, stride_ckv, HEAD_DIM), scale, mask=row_ok
    )


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    cache_ptr,
    scale_ptr,  # int8 caches: the cache's memory as fp32 (its row scales); else unused
    slot_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cb,
    stride_ckv,
    stride_cs,
    stride_ch,
    block_size,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    FP8_MAX: tl.constexpr = 0.0,  # > 0: the cache is fp8, values saturate at +-FP8_MAX
    INT8: tl.constexpr = False,  # the cache holds int8 rows with their scales (kv_quant.py)
):
    # One program per token: all its heads, K and V.
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:
        return
    block_id = slot // block_size
    offset = slot % block_size
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, HEAD_DIM)
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM)
    src_k = k_ptr + token.to(tl.int64) * stride_kt + heads[:, None] * stride_kh + dims[None, :]
    src_v = v_ptr + token.to(tl.int64) * stride_vt + heads[:, None] * stride_vh + dims[None, :]
    in_block = offset * stride_cs + heads * stride_ch
    dst = cache_ptr + (block_id * stride_cb + in_block)[:, None] + dims[None, :]
    k = tl.load(src_k, mask=mask, other=0.0)
    v = tl.load(src_v, mask=mask, other=0.0)
    if INT8:
        head_ok = heads < NUM_KV_HEADS
        _store_int8_row(
            cache_ptr, scale_ptr, block_id, in_block, dims, k.to(tl.float32), mask, head_ok, stride_cb, stride_ckv,
            HEAD_DIM,
        )  # fmt: skip
        _store_int8_row(
            cache_ptr, scale_ptr, block_id, in_block + stride_ckv, dims, v.to(tl.float32), mask, head_ok, stride_cb,
            stride_ckv, HEAD_DIM,
        )  # fmt: skip
        return
    if FP8_MAX > 0:
        k = saturate_round_fp8(k.to(tl.float32), FP8_MAX)
        v = saturate_round_fp8(v.to(tl.float32), FP8_MAX)
    tl.store(dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + stride_ckv, v.to(cache_ptr.dtype.element_ty), mask=mask)


def check_store_args(
    k: torch.Tensor, v: torch.Tensor, kv_layer: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """The shape, dtype, layout and device contract of the KV store kernels (asserts, no device sync)."""
    num_tokens, num_kv_heads, head_dim = k.shape
    assert v.shape == k.shape, f"k {tuple(k.shape)} and v {tuple(v.shape)} differ"
    assert kv_layer.dim() == 5 and kv_layer.shape[1] == 2, f"kv_layer shape {tuple(kv_layer.shape)}"
    assert kv_layer.shape[3] == num_kv_heads and value_dim(kv_layer) == head_dim, (
        f"kv_layer heads/row {tuple(kv_layer.shape[3:])} do not hold k's {(num_kv_heads, head_dim)}"
    )
    assert slot_mapping.shape == (num_tokens,) and slot_mapping.dtype == torch.int64, (
        f"slot_mapping must be int64 [{num_tokens}], got {slot_mapping.dtype} {tuple(slot_mapping.shape)}"
    )
    assert k.dtype == v.dtype and kv_layer.dtype in (k.dtype, *FP8_DTYPES, torch.int8), (
        f"dtypes k {k.dtype} v {v.dtype} cache {kv_layer.dtype}"
    )
    assert k.stride(2) == 1 and v.stride(2) == 1 and kv_layer.stride(4) == 1, "head_dim must be contiguous"
    assert k.device == v.device == kv_layer.device == slot_mapping.device, "all tensors on one device"
    assert head_dim & (head_dim - 1) == 0, f"head_dim {head_dim} must be a power of two"


def store_kv(
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int64, negative = skip
) -> None:
    """Triton kernel wrapper: same contract as `store_kv_ref`. k and v may be strided views
    (e.g. slices of a fused qkv output) as long as head_dim is the contiguous dimension."""
    check_store_args(k, v, kv_layer, slot_mapping)
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    _store_kv_kernel[(num_tokens,)](
        k,
        v,
        kv_layer,
        scale_view(kv_layer),
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        *kv_strides(kv_layer),
        kv_layer.shape[2],
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        FP8_MAX=fp8_max(kv_layer.dtype),
        INT8=kv_layer.dtype == torch.int8,
        BLOCK_H=triton.next_power_of_2(num_kv_heads),
    )
