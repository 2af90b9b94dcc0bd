"""RoPE on q and k, and k, v into the paged KV cache, in one kernel (decode's hot path).

One launch per layer instead of two (`fused_ops.apply_rope`, then `store_kv.store_kv`): at batch
1 a decode step is hundreds of short kernels, each about 2 us on an H100 whatever its bytes, so
fusing the two saves about 1.5 us per layer. Same contracts as the two it replaces:
- q and k are rotated in place (x * cos + rotate_half(x) * sin in fp32, `apply_rope_ref`);
- rotated k and v go to slot = block_id * block_size + offset of `kv_layer`; a negative slot
  is padding and writes nothing (`store_kv_ref`); an int8 cache gets each row quantized with its
  own scale (`kv_quant.py`), as `store_kv` writes it.

`NewKV` hands the same work to decode attention instead (kernels/decode_attention.py): a pure
decode step's q is rotated in the attention programs' registers (never written back) and the
program whose split holds the new key rotates and stores it and v before it reads its keys
(`rope_group_rows`, `store_new_kv`), so the step has one kernel fewer a layer. Both rotate with
`_rope_rotate`'s `rope_halves`, so q and the stored k round the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvspill.kernels.fused_ops import (
    _rope_cos_sin,
    _rope_rotate,
    apply_rope_ref,
    check_rope_args,
    rope_halves,
)
from kvspill.kernels.kv_quant import fp8_max, kv_strides, scale_view
from kvspill.kernels.pdl import pdl_meta, pdl_wait
from kvspill.kernels.store_kv import (
    check_store_args,
    int8_quantize,
    int8_row_scale,
    int8_scale_index,
    saturate_round_fp8,
    store_kv_ref,
)
from kvspill.kernels.triton_compat import tl, triton


@dataclass(frozen=True)
class NewKV:
    """A decode step's new k and v (not rotated yet) and what RoPE and the store need: decode
    attention rotates q and k and writes k, v to `slot_mapping` itself (rows are the decode rows,
    in order; a negative slot writes nothing). q and k are left as they are."""

    k: torch.Tensor  # [num_seqs, num_kv_heads, head_dim]
    v: torch.Tensor  # [num_seqs, num_kv_heads, head_dim]
    positions: torch.Tensor  # [num_seqs] int64
    cos_sin_cache: torch.Tensor  # [max_positions, head_dim] float32
    slot_mapping: torch.Tensor  # [num_seqs] int64

    def check(self, q: torch.Tensor, kv_layer: torch.Tensor) -> None:
        """The contract of the rope_store kernel, for these rows (asserts, no device sync)."""
        assert kv_layer.dtype != torch.int8, "int8 pools rotate to their basis first: rope_and_store_kv"
        check_rope_args(q, self.k, self.positions, self.cos_sin_cache)
        check_store_args(self.k, self.v, kv_layer, self.slot_mapping)


def rope_and_store_kv_ref(
    q: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    positions: torch.Tensor,  # [num_tokens] int64
    cos_sin_cache: torch.Tensor,  # [max_positions, head_dim] float32
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int64, negative = skip
) -> None:
    """Torch reference: `apply_rope_ref`, then `store_kv_ref`."""
    apply_rope_ref(q, k, positions, cos_sin_cache)
    store_kv_ref(k, v, kv_layer, slot_mapping)


@triton.jit
def _to_cache(x, cache_ptr, FP8_MAX: tl.constexpr):
    if FP8_MAX > 0:
        x = saturate_round_fp8(x.to(tl.float32), FP8_MAX)
    return x.to(cache_ptr.dtype.element_ty)


@triton.jit
def rope_group_rows(rows, ok, cos, sin, HEAD_DIM: tl.constexpr):
    """The rows at `rows` [R] (pointers to each row's first element; rows off `ok` give 0) rotated
    by `cos`, `sin` ([HEAD_DIM // 2] fp32, `_rope_cos_sin`): [R, HEAD_DIM] in their dtype. The halves
    go through `rope_halves` as separate tensors, joined after: written over whole rows, a shared
    x * cos let the GPU compiler fuse the other product into an fma and round differently."""
    HALF: tl.constexpr = HEAD_DIM // 2
    ptrs = rows[:, None] + tl.arange(0, HALF)[None, :]
    x1 = tl.load(ptrs, mask=ok[:, None], other=0.0).to(tl.float32)
    x2 = tl.load(ptrs + HALF, mask=ok[:, None], other=0.0).to(tl.float32)
    out1, out2 = rope_halves(x1, x2, cos[None, :], sin[None, :])
    out1, out2 = out1.to(rows.dtype.element_ty), out2.to(rows.dtype.element_ty)
    both = tl.permute(tl.join(out1, out2), (0, 2, 1))  # [R, 2, HALF]: the halves in order
    return tl.reshape(both, (rows.shape[0], HEAD_DIM))


@triton.jit
def store_new_kv(
    k_row,
    v_row,
    cache_ptr,
    slot,
    cos,
    sin,
    head_off,
    stride_cb,
    stride_ckv,
    stride_cs,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """One KV head of a new token: k at `k_row` rotated by `cos`, `sin`, and v at `v_row`, into
    cache slot `slot` (>= 0) of the model dtype or fp8, as `_store_kv` writes them."""
    dims = tl.arange(0, HEAD_DIM)
    one = tl.arange(0, 1)
    k = rope_group_rows(k_row + one, one == 0, cos, sin, HEAD_DIM)
    dst = cache_ptr + (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs + head_off + dims
    tl.store(dst[None, :], _to_cache(k, cache_ptr, FP8_MAX))
    tl.store(dst + stride_ckv, _to_cache(tl.load(v_row + dims), cache_ptr, FP8_MAX))


@triton.jit
def _store_int8_halves(
    cache_ptr,
    scale_ptr,
    block_id,
    in_block,
    dims,
    x1,
    x2,
    ok,
    head_ok,
    stride_cb,
    stride_ckv,
    HALF: tl.constexpr,
):
    """Rows given as two halves [R, HALF] (fp32): one scale over both, as `store_kv` computes it."""
    scale = int8_row_scale(tl.maximum(tl.max(tl.abs(x1), 1), tl.max(tl.abs(x2), 1)))
    dst = cache_ptr + (block_id * stride_cb + in_block)[:, None] + dims[None, :]
    tl.store(dst, int8_quantize(x1, scale), mask=ok)
    tl.store(dst + HALF, int8_quantize(x2, scale), mask=ok)
    tl.store(
        scale_ptr + int8_scale_index(block_id, in_block, stride_cb, stride_ckv, 2 * HALF), scale, mask=head_ok
    )


@triton.jit
def _rope_store_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pos_ptr,
    cos_sin_ptr,
    cache_ptr,
    scale_ptr,  # int8 caches: the cache's memory as fp32 (its row scales); else unused
    slot_ptr,
    num_heads,
    num_kv_heads,
    block_size,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cos,
    stride_cb,
    stride_ckv,
    stride_cs,
    stride_ch,
    HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    FP8_MAX: tl.constexpr = 0.0,  # > 0: the cache is fp8 (--kv-cache-dtype), values saturate
    INT8: tl.constexpr = False,  # the cache holds int8 rows with their scales (kv_quant.py)
    PDL: tl.constexpr = False,
):
    # One program per token: its q heads, then its k heads (rotated once, written twice) and v.
    pdl_wait(PDL)
    token = tl.program_id(0).to(tl.int64)
    cos, sin = _rope_cos_sin(cos_sin_ptr, pos_ptr, token, stride_cos, HALF)
    _rope_rotate(q_ptr, token, stride_qt, stride_qh, num_heads, cos, sin, HALF, BLOCK_HQ)
    k1, k2 = _rope_rotate(k_ptr, token, stride_kt, stride_kh, num_kv_heads, cos, sin, HALF, BLOCK_HK)
    slot = tl.load(slot_ptr + token)
    if slot >= 0:
        heads = tl.arange(0, BLOCK_HK)
        dims = tl.arange(0, HALF)
        ok = (heads[:, None] < num_kv_heads) & (dims[None, :] < HALF)
        block_id = slot // block_size
        in_block = (slot % block_size) * stride_cs + heads * stride_ch
        v_ptrs = v_ptr + token * stride_vt + heads[:, None] * stride_vh + dims[None, :]
        if INT8:
            head_ok = heads < num_kv_heads
            _store_int8_kv(
                cache_ptr,
                scale_ptr,
                block_id,
                in_block,
                k1,
                k2,
                v_ptrs,
                ok,
                head_ok,
                stride_cb,
                stride_ckv,
                HALF,
            )
        else:
            _store_kv(cache_ptr, block_id, in_block, k1, k2, v_ptrs, ok, stride_cb, stride_ckv, HALF, FP8_MAX)


@triton.jit
def _store_int8_kv(
    cache_ptr,
    scale_ptr,
    block_id,
    in_block,
    k1,
    k2,
    v_ptrs,
    ok,
    head_ok,
    stride_cb,
    stride_ckv,
    HALF: tl.constexpr,
):
    """The token's rotated k (halves k1, k2) and its v rows into an int8 cache, each row
    quantized with its own scale."""
    dims = tl.arange(0, HALF)
    v1 = tl.load(v_ptrs, mask=ok, other=0.0).to(tl.float32)
    v2 = tl.load(v_ptrs + HALF, mask=ok, other=0.0).to(tl.float32)
    kf1, kf2 = k1.to(tl.float32), k2.to(tl.float32)  # new names: k1, k2 keep their dtype
    _store_int8_halves(
        cache_ptr, scale_ptr, block_id, in_block, dims, kf1, kf2, ok, head_ok, stride_cb, stride_ckv, HALF
    )
    v_in_block = in_block + stride_ckv
    _store_int8_halves(
        cache_ptr, scale_ptr, block_id, v_in_block, dims, v1, v2, ok, head_ok, stride_cb, stride_ckv, HALF
    )


@triton.jit
def _store_kv(
    cache_ptr,
    block_id,
    in_block,
    k1,
    k2,
    v_ptrs,
    ok,
    stride_cb,
    stride_ckv,
    HALF: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """The token's rotated k (halves k1, k2) and its v rows into a cache of the model dtype or
    fp8 (values saturate)."""
    dims = tl.arange(0, HALF)
    dst = cache_ptr + (block_id * stride_cb + in_block)[:, None] + dims[None, :]
    tl.store(dst, _to_cache(k1, cache_ptr, FP8_MAX), mask=ok)
    tl.store(dst + HALF, _to_cache(k2, cache_ptr, FP8_MAX), mask=ok)
    v1 = _to_cache(tl.load(v_ptrs, mask=ok), cache_ptr, FP8_MAX)
    tl.store(dst + stride_ckv, v1, mask=ok)
    tl.store(
        dst + stride_ckv + HALF,
        _to_cache(tl.load(v_ptrs + HALF, mask=ok), cache_ptr, FP8_MAX),
        mask=ok,
    )


def rope_and_store_kv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    kv_layer: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Triton wrapper; same contract as `rope_and_store_kv_ref`. q, k, v may be strided views
    (slices of a fused qkv output) with head_dim contiguous."""
    check_rope_args(q, k, positions, cos_sin_cache)
    check_store_args(k, v, kv_layer, slot_mapping)
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens == 0:
        return
    num_kv_heads = k.shape[1]
    _rope_store_kernel[(num_tokens,)](
        q,
        k,
        v,
        positions,
        cos_sin_cache,
        kv_layer,
        scale_view(kv_layer),
        slot_mapping,
        num_heads,
        num_kv_heads,
        kv_layer.shape[2],
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        cos_sin_cache.stride(0),
        *kv_strides(kv_layer),
        HALF=head_dim // 2,
        BLOCK_HQ=triton.next_power_of_2(num_heads),
        BLOCK_HK=triton.next_power_of_2(num_kv_heads),
        FP8_MAX=fp8_max(kv_layer.dtype),
        INT8=kv_layer.dtype == torch.int8,
        **pdl_meta(q.device),
    )
