"""Triton dequantization of GGUF quantized weights (whole rows), and the per-type device helpers
that the fused GEMV (gguf_gemv.py) shares.

Shapes:
    dequantize: weight.data uint8 [out_features, bytes_per_row] -> [out_features, in_features]
                of bf16 / fp16 / fp32 (the prefill path: dequantize a layer into a reused buffer,
                then one dense matmul).

Tiling (both kernels): a tile is [BLOCK_N rows, KB blocks, NA, NB]: element j = a * NB + b of
each block, with NB contiguous bytes per load. (NA, NB) is chosen per type so that every field a
row of the tile needs is one contiguous byte run: (2, 16) for the 32-weight types (a = nibble
half), (8, 32) for Q4_K / Q5_K (a = sub-block of 32), (16, 16) for Q6_K (a = sub-block of 16).
`dequant_tile` returns, per type, the integer quants q as exact floats and the (scale, bias) of
their sub-block: w = scale * q, + bias (Q4_1, Q5_1) or - bias (Q4_K, Q5_K), gguf's operations
in gguf's order.

Invariants:
- In float32 the kernel equals `gguf_formats.dequantize_ref` (and so gguf) bit for bit: no
  fused multiply-add (the launch sets enable_fp_fusion=False), ints become floats exactly.
- Ints become floats through the bits 0x4B000000 | v (= 2**23 + v as a float), one OR and one
  subtract, instead of the int-to-float convert, which runs at a quarter of the FMA rate.
"""

from __future__ import annotations

import torch

from kvspill.kernels.gguf_formats import FORMATS, QuantizedWeight
from kvspill.kernels.triton_compat import tl, triton

# Kernel ids (the QTYPE constexpr) and the (NA, NB) element tiling of each type's block.
QTYPE_IDS = {"Q4_0": 0, "Q4_1": 1, "Q5_0": 2, "Q5_1": 3, "Q8_0": 4, "Q4_K": 5, "Q5_K": 6, "Q6_K": 7}
_TILING = {"Q4_0": (2, 16), "Q4_1": (2, 16), "Q5_0": (2, 16), "Q5_1": (2, 16), "Q8_0": (2, 16)}
_TILING.update({"Q4_K": (8, 32), "Q5_K": (8, 32), "Q6_K": (16, 16)})
# BIAS: w = scale * q + bias (1: Q4_1, Q5_1, bias = m), w = scale * q - bias (-1: K-quants,
# bias = dmin * m: gguf subtracts, and Triton's `-x` is 0 - x, which loses the sign of a zero).
_BIAS = {"Q4_1": 1, "Q5_1": 1, "Q4_K": -1, "Q5_K": -1}
CHUNK = 256  # weights of a row per tile (8 legacy blocks or 1 K-quant super-block)


def kernel_meta(qtype: str, chunk: int = CHUNK) -> dict[str, int]:
    """The constexpr arguments that describe `qtype` to the kernels, for tiles of `chunk`
    weights a row (a power of two >= 256)."""
    fmt = FORMATS[qtype]
    na, nb = _TILING[qtype]
    return dict(
        QTYPE=QTYPE_IDS[qtype],
        QK=fmt.block_size,
        TYPE_SIZE=fmt.type_size,
        NA=na,
        NB=nb,
        BIAS=_BIAS.get(qtype, 0),
        KB=chunk // fmt.block_size,
    )


@triton.jit
def _i2f(v, offset: tl.constexpr):
    """float(v - offset), exact for 0 <= v < 2**23: 0x4B000000 | v is the float 2**23 + v."""
    return (v | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + offset)


@triton.jit
def _u8(ptr, mask):
    return tl.load(ptr, mask=mask, other=0).to(tl.int32)


@triton.jit
def _f16(ptr, mask):
    """The little-endian fp16 field at byte `ptr` as float32 (exact); masked lanes read 0."""
    bits = _u8(ptr, mask) | (_u8(ptr + 1, mask) << 8)
    return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _legacy_tile(blk, mask, a, b, QTYPE: tl.constexpr):
    """Q4_0 .. Q5_1 with (NA, NB) = (2, 16): element a * 16 + b is nibble a of qs[b]."""
    # qs sits at 2 + 2 * QTYPE (Q4_0: 2, Q4_1: 4, Q5_0: 6, Q5_1: 8), the u32 qh 4 bytes before.
    q = (_u8(blk + 2 + 2 * QTYPE + b, mask) >> (4 * a)) & 0xF  # [BN, KB, 2, 16]
    if QTYPE >= 2:  # Q5_0, Q5_1: bit j of the little-endian u32 qh is the 5th bit of element j
        qh_ptr = blk + 2 * QTYPE - 2
        qh = _u8(qh_ptr, mask) | (_u8(qh_ptr + 1, mask) << 8)
        qh = qh | (_u8(qh_ptr + 2, mask) << 16) | (_u8(qh_ptr + 3, mask) << 24)
        q = q | (((qh >> (a * 16 + b)) & 1) << 4)
    scale = _f16(blk, mask)  # d, [BN, KB, 1, 1]
    if QTYPE == 1 or QTYPE == 3:
        return _i2f(q, 0.0), scale, _f16(blk + 2, mask)  # w = d * q + m
    else:
        return _i2f(q, 8.0 * (1 + QTYPE // 2)), scale, scale  # w = d * (q - 8 or 16); no bias


@triton.jit
def _k_scale_min(blk, mask, a):
    """Q4_K / Q5_K: the 6-bit (scale, min) of sub-block a ([1, 1, 8, 1]) from the 12 bytes at 4."""
    low = a < 4
    s_a = _u8(blk + 4 + a, mask)
    s_a4 = _u8(blk + 8 + a, mask)  # s[a + 4]
    s_am4 = _u8(blk + 4 + a % 4, mask)  # s[a - 4] where a >= 4
    sc = tl.where(low, s_a & 63, (s_a4 & 15) | ((s_am4 >> 2) & 48))
    mn = tl.where(low, s_a4 & 63, (s_a4 >> 4) | ((s_a >> 2) & 48))
    return sc, mn


@triton.jit
def _q45k_tile(blk, mask, a, b, QTYPE: tl.constexpr):
    """Q4_K / Q5_K with (NA, NB) = (8, 32): sub-block a takes nibble a % 2 of qs[(a // 2) * 32 + b]."""
    qs_ptr = blk + 16 + 32 * (QTYPE - 5)  # Q4_K: 16, Q5_K: 48 (after qh[32])
    q = (_u8(qs_ptr + (a // 2) * 32 + b, mask) >> (4 * (a % 2))) & 0xF
    if QTYPE == 6:
        q = q | (((_u8(blk + 16 + b, mask) >> a) & 1) << 4)  # bit a of qh[b]
    sc, mn = _k_scale_min(blk, mask, a)
    scale = _f16(blk, mask) * _i2f(sc, 0.0)  # d * sc, [BN, KB, 8, 1]
    return _i2f(q, 0.0), scale, _f16(blk + 2, mask) * _i2f(mn, 0.0)  # bias: dmin * m


@triton.jit
def _q6k_tile(blk, sblk, mask, a, b):
    """Q6_K with (NA, NB) = (16, 16): element j = a * 16 + b; half h = j // 128 (= a // 8). The
    quants at `blk`, the scales and d at sblk + 192 and + 208 (`block_at`)."""
    h = a // 8
    ql = (_u8(blk + h * 64 + (a % 4) * 16 + b, mask) >> (4 * ((a % 8) // 4))) & 0xF
    qh = (_u8(blk + 128 + h * 32 + (a % 2) * 16 + b, mask) >> (2 * ((a % 8) // 2))) & 3
    scale = _f16(sblk + 208, mask) * _i2f(_u8(sblk + 192 + a, mask) ^ 0x80, 128.0)  # d * int8 sc
    qf = _i2f(ql | (qh << 4), 32.0)
    return qf, scale, scale


@triton.jit
def block_at(row_ptr, kb, num_blocks, TYPE_SIZE: tl.constexpr, SPLIT: tl.constexpr):
    """(blk, sblk) of blocks kb of the rows at row_ptr: where every Q6_K kernel reads a block's
    quants (ql, qh at blk + 0..191) and its scales and d (sblk + 192..209). In gguf's layout both
    are the block (TYPE_SIZE bytes apart; `dequant_tile` takes any type's this way); in the split
    layout (gguf_formats.split_q6k_rows) the quants lie in the row's first part, 192 bytes a
    block, and sblk is set 192 bytes before the block's 18 in the second."""
    if SPLIT:
        blk = row_ptr + kb * 192
        sblk = row_ptr + num_blocks * 192 + kb * 18 - 192
    else:
        blk = row_ptr + kb * TYPE_SIZE
        sblk = blk
    return blk, sblk


@triton.jit
def dequant_tile(blk, sblk, mask, a, b, QTYPE: tl.constexpr):
    """Block pointers blk [BN, KB, 1, 1] (uint8) and sblk (`block_at`: blk but for split Q6_K
    rows), mask [BN, KB, 1, 1], a [1, 1, NA, 1], b [1, 1, 1, NB] -> (q [BN, KB, NA, NB], scale,
    bias [BN, KB, NA or 1, 1]), all float32, with w = scale * q (+ or - bias, as kernel_meta's BIAS
    says). Masked blocks give zeros."""
    if QTYPE <= 3:
        q, scale, bias = _legacy_tile(blk, mask, a, b, QTYPE)
    elif QTYPE == 4:  # Q8_0: int8 qs[a * 16 + b] at 2
        q = _i2f(_u8(blk + 2 + a * 16 + b, mask) ^ 0x80, 128.0)
        scale = _f16(blk, mask)
        bias = scale
    elif QTYPE <= 6:
        q, scale, bias = _q45k_tile(blk, mask, a, b, QTYPE)
    else:
        q, scale, bias = _q6k_tile(blk, sblk, mask, a, b)
    return q, scale, bias


@triton.jit
def tile_coords(pid_n, BLOCK_N: tl.constexpr, KB: tl.constexpr, NA: tl.constexpr, NB: tl.constexpr):
    """Index vectors of a [BLOCK_N, KB, NA, NB] tile: rows n, block offsets kb, a, b."""
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[:, None, None, None]
    kb = tl.arange(0, KB)[None, :, None, None]
    a = tl.arange(0, NA)[None, None, :, None]
    b = tl.arange(0, NB)[None, None, None, :]
    return n, kb, a, b


@triton.jit
def _dequant_kernel(
    w_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    stride_o,
    QTYPE: tl.constexpr,
    QK: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    NA: tl.constexpr,
    NB: tl.constexpr,
    BIAS: tl.constexpr,
    KB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr = False,  # Q6_K rows in the split layout (block_at)
):
    # Grid: (cdiv(rows, BLOCK_N), cdiv(num_blocks, KB)); one [BLOCK_N, KB * QK] tile each.
    n, kb, a, b = tile_coords(tl.program_id(0), BLOCK_N, KB, NA, NB)
    kb = tl.program_id(1) * KB + kb
    mask = (n < rows) & (kb < num_blocks)  # [BLOCK_N, KB, 1, 1]
    blk, sblk = block_at(w_ptr + n.to(tl.int64) * stride_w, kb, num_blocks, TYPE_SIZE, SPLIT)
    q, scale, bias = dequant_tile(blk, sblk, mask, a, b, QTYPE)
    w = scale * q
    if BIAS == 1:
        w = w + bias
    elif BIAS == -1:
        w = w - bias
    cols = kb * QK + a * NB + b
    tl.store(out_ptr + n.to(tl.int64) * stride_o + cols, w.to(out_ptr.dtype.element_ty), mask=mask)


# A program dequantizes 8 rows x 512 weights with 2 warps (64 weights a thread). Swept on an
# H200, 14336 x 4096 to bf16, GB/s read + written: Q4_0 3080, Q4_K 3250, Q5_K 2880, Q8_0 2690,
# Q6_K 2070 (a device copy: 4225); 16 x 256 with 4 warps was 10-30% slower.
DEQUANT_CHUNK = 512
DEQUANT_BLOCK_N = 8
DEQUANT_NUM_WARPS = 2


def dequantize(weight: QuantizedWeight, dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton dequantization -> [out_features, in_features] of `dtype` (into `out` if given: a
    buffer of that shape and dtype with contiguous rows, e.g. a view of a reused scratch)."""
    assert dtype in (torch.float32, torch.float16, torch.bfloat16), f"unsupported output dtype {dtype}"
    rows, in_features = weight.out_features, weight.in_features
    if out is None:
        out = torch.empty((rows, in_features), dtype=dtype, device=weight.device)
    assert out.shape == (rows, in_features) and out.dtype == dtype and out.stride(1) == 1, (
        f"out must be {dtype} [{rows}, {in_features}] with contiguous rows, got {out.dtype} {tuple(out.shape)}"
    )
    assert out.device == weight.device, f"out on {out.device}, weight on {weight.device}"
    meta = kernel_meta(weight.qtype, DEQUANT_CHUNK)
    num_blocks = in_features // weight.format.block_size
    if rows > 0 and num_blocks > 0:
        grid = (triton.cdiv(rows, DEQUANT_BLOCK_N), triton.cdiv(num_blocks, meta["KB"]))
        _dequant_kernel[grid](
            weight.data,
            out,
            rows,
            num_blocks,
            weight.data.stride(0),
            out.stride(0),
            **meta,
            **({"SPLIT": True} if weight.split else {}),
            BLOCK_N=DEQUANT_BLOCK_N,
            num_warps=DEQUANT_NUM_WARPS,
            enable_fp_fusion=False,  # bit-exact: d * q + m must not become one FMA
        )
    return out
