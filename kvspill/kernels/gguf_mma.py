"""Tensor-core quantized GEMM for a few tokens (decode batches): Q4_K, Q5_K, Q6_K and Q4_1.

Shapes:
    quant_matmul_mma: x [num_tokens <= MMA_MAX_TOKENS, in_features] bf16 / fp16 / fp32, weight
                      QuantizedWeight [out_features, in_features] (Q4_K, Q5_K, Q6_K or Q4_1;
                      in_features a multiple of 256), bias
                      [out_features] or None -> [num_tokens, out_features] in x's dtype

Why: at 2-64 tokens a step still reads every weight once, so it should cost about what one token
costs. The dequantize-then-GEMM path writes and reads a dense copy (3.5x the bytes), and the
CUDA-core GEMV spends one FMA per weight per token. Here (as Marlin does for int4) each program
streams BLOCK_N rows of super-blocks once and feeds them to the tensor cores against all tokens
(padded to T_PAD: 8, 16, 32, 64). Programs split the rows and, with SPLIT_K > 1, the super-blocks.

Forms (MmaConfig):
- `words` (the picks, gguf_mma_configs.MMA_CONFIGS; kernels/gguf_mma_words.py): the quants read as whole words
  and dequantized in registers by a magic-number asm into planes, x permuted once per call to
  their order (`words_x`), one dot a plane. Split K without atomics on the output: the last
  split of a row tile adds the fp32 partials in split order (`_store_reduced`), so a batch's
  tokens are the same on every run.
- `sub`: one sub-block at a time, the integer quants to the tensor cores as they are and the
  sub-block's scale after the dot, the min (Q4_K) or offset (Q6_K) through each sub-block's sum of
  x (one reduce kernel a call); `magic` makes a quant 128 + q by a mantissa OR and takes
  128 * sum(x) back out. Split K adds fp32 partials with atomics (the caller casts).
- `whole`: a super-block's [BLOCK_N, 256] weights dequantized in fp32, rounded to x's dtype, one
  K = 256 dot (Q6_K: two of 128).
- Q5_K runs Q4_K's `sub` and `whole` forms with each quant's fifth bit from the super-block's qh
  (no words form: its asm takes nibbles).
- Q4_1 (int4 checkpoints) runs the `sub` form over 8 of its 32-weight blocks at a time, each
  block's nibble halves two K = 16 dots, d and m after them; no entry in the measured table yet.

Measured (H200, Triton 3.6): the words form's loop is about 690 SASS instructions a super-block
per thread against 1,300 for the magic sub-block form; the 5 Llama-3.1-8B shapes at 8 tokens,
Q4_K 288 us against the sub-block form's 410, Q6_K 552 against 910, still issue-bound at 15-40%
of the copy ceiling (bench/results/2026-12-03-h200-q4k-words/; the sub-block and whole forms'
sweeps: bench/results/2026-12-02-h200-gguf-mma/, 2026-12-02-h200-q4km-peer/). On two warps the
dots are mma.sync, not wgmma, and at 4-8 tokens faster still (bench/results/2026-12-03-h200-mma-sync/).
Which config a call runs, and tuned configs of another card (KVSPILL_MMA_CONFIGS):
kernels/gguf_mma_configs.py.

Invariants:
- The result equals dequantize_ref(weight) @ x.T up to fp32 rounding and, for the half-precision
  weights of the `words` and `whole` forms, their rounding to x's dtype (the `sub` form's
  quant-times-x products are exact in fp32; its magic variant adds the rounding of
  (128 + offset) * sum(x) taken back out).
- Weight bytes are read once per launch; Q4_K rows must be 4-byte aligned (its header is read as
  words), Q6_K rows 2-byte aligned.
- Under Triton's interpreter (CPU tensors) the dots run in fp32 and the words form dequantizes in
  fp32 (no asm there): its tl.dot of a bf16 tile made in the kernel is wrong (see
  gguf_gemv._interpreted).
"""

from __future__ import annotations

import torch

from kvspill.kernels.fused_ops import silu_and_mul
from kvspill.kernels.gguf_dequant import block_at
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv import check_out
from kvspill.kernels.gguf_gemv_lane import _f16_bits
from kvspill.kernels.gguf_mma_configs import (
    MMA_MAX_TOKENS,
    MMA_TYPES,
    ROW_ALIGN,
    WHOLE_TYPES,
    WORDS_TYPES,
    MmaConfig,
    for_shape,
    mma_config,
    rows_aligned,
)
from kvspill.kernels.gguf_mma_words import (
    q4k_scales_mins,
    q4k_super_block_words,
    q6k_super_block_words,
    words_x,
)
from kvspill.kernels.pdl import pdl_meta, pdl_wait
from kvspill.kernels.triton_compat import tl, triton


@triton.jit
def _byte(w1, w2, w3, i: tl.constexpr):
    """Byte i (0..11) of Q4_K's scale bytes, held as three little-endian int32 words."""
    if i < 4:
        word = w1
    elif i < 8:
        word = w2
    else:
        word = w3
    return (word >> (8 * (i % 4))) & 0xFF


@triton.jit
def _q4k_scale_min(w1, w2, w3, s: tl.constexpr):
    """(sc, m) of Q4_K sub-block s: 6-bit fields of the 12 scale bytes (ggml's get_scale_min_k4)."""
    if s < 4:
        sc = _byte(w1, w2, w3, s) & 63
        m = _byte(w1, w2, w3, s + 4) & 63
    else:
        sc = (_byte(w1, w2, w3, s + 4) & 0xF) | ((_byte(w1, w2, w3, s - 4) >> 6) << 4)
        m = (_byte(w1, w2, w3, s + 4) >> 4) | ((_byte(w1, w2, w3, s) >> 6) << 4)
    return sc.to(tl.float32), m.to(tl.float32)


@triton.jit
def _as_128_plus(q, DOT_DTYPE: tl.constexpr):
    """The quants `q` (0..63: Q4_K nibbles, Q6_K 6-bit values) as 128 + q in the dot's dtype, made
    by OR-ing q into the mantissa of 128.0 (no int-to-float convert). Exact for q < 128: at 128 a
    bf16 mantissa step is 1 (7 bits), an fp16 step 1/8 (10 bits, hence q << 3), an fp32 step 2**-16
    (hence q << 16). The caller subtracts 128 * sum(x) after the dot."""
    if DOT_DTYPE == tl.float32:
        return ((q.to(tl.int32) << 16) | 0x43000000).to(tl.float32, bitcast=True)
    elif DOT_DTYPE == tl.bfloat16:
        return (q.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)
    else:
        return ((q.to(tl.int16) << 3) | 0x5800).to(tl.float16, bitcast=True)


@triton.jit
def _dot_sub_block(
    q,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    SUB: tl.constexpr,
    OFFSET: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """(sum_k (q_k - OFFSET) x_k [BLOCK_N, T_PAD], sum_k x_k [1, T_PAD]) over the SUB-weight
    sub-block at columns k0.. of the program's rows: quants `q` [BLOCK_N, SUB] (0..63); `xs_ptr`:
    x's sums per sub-block [tokens, K / SUB]."""
    kk = tl.arange(0, SUB)
    x = tl.load(x_ptr + t[None, :] * stride_x + k0 + kk[:, None], mask=t_ok[None, :], other=0.0)
    x = x.to(DOT_DTYPE)
    xsum = tl.load(xs_ptr + t * stride_xs + k0 // SUB, mask=t_ok, other=0.0)[None, :]
    if MAGIC:
        p = tl.dot(_as_128_plus(q, DOT_DTYPE), x, input_precision="ieee") - (128 + OFFSET) * xsum
    else:
        p = tl.dot(q.to(DOT_DTYPE), x, input_precision="ieee")
        if OFFSET != 0:
            p -= OFFSET * xsum
    return p, xsum


@triton.jit
def _q4k_super_block(
    acc,
    base,
    n_ok,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    DOT_DTYPE: tl.constexpr,
    MAGIC: tl.constexpr,
    Q5: tl.constexpr = False,
    Q41: tl.constexpr = False,
):
    """acc += one Q4_K super-block of the program's rows (256 weights a row, 144 bytes at `base`
    [BLOCK_N]): d@0 | dmin@2 | scales[12]@4 | qs[128]@16; sub-block s (32 weights) takes the
    (s % 2) nibble of qs[(s // 2) * 32 : +32]; w = d*sc * q - dmin*m. Q5: a Q5_K super-block
    (176 bytes: qh[32]@16, qs@48), whose quant l of sub-block s also takes bit s of qh[l] as 16.
    Q41: 8 Q4_1 blocks (`_q41_super_block`)."""
    if Q41:
        return _q41_super_block(
            acc, base, n_ok, x_ptr, stride_x, xs_ptr, stride_xs, k0, t, t_ok, DOT_DTYPE, MAGIC
        )
    words = base.to(tl.pointer_type(tl.int32))
    w0 = tl.load(words, mask=n_ok, other=0)
    w1 = tl.load(words + 1, mask=n_ok, other=0)
    w2 = tl.load(words + 2, mask=n_ok, other=0)
    w3 = tl.load(words + 3, mask=n_ok, other=0)
    d = _f16_bits(w0 & 0xFFFF)
    dmin = _f16_bits((w0 >> 16) & 0xFFFF)
    col = tl.arange(0, 32)
    if Q5:
        qh = tl.load(base[:, None] + 16 + col[None, :], mask=n_ok[:, None], other=0)
    for j in tl.static_range(4):
        qs = tl.load(base[:, None] + (48 if Q5 else 16) + 32 * j + col[None, :], mask=n_ok[:, None], other=0)
        for h in tl.static_range(2):
            sc, m = _q4k_scale_min(w1, w2, w3, 2 * j + h)
            if h == 0:
                q = qs & 0xF
            else:
                q = qs >> 4
            if Q5:
                q = q | (((qh >> (2 * j + h)) & 1) << 4)
            k = k0 + 64 * j + 32 * h
            p, xsum = _dot_sub_block(
                q, x_ptr, stride_x, xs_ptr, stride_xs, k, t, t_ok, 32, 0, DOT_DTYPE, MAGIC
            )
            acc = acc + (d * sc)[:, None] * p - (dmin * m)[:, None] * xsum
    return acc


@triton.jit
def _q41_super_block(
    acc,
    base,
    n_ok,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    DOT_DTYPE: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """acc += 8 Q4_1 blocks of the program's rows (32 weights, 20 bytes each at `base` + 20 b
    [BLOCK_N]): d@0 | m@2 | qs[16]@4; weight l of a block is qs[l] & 15, weight 16 + l qs[l] >> 4;
    w = d * q + m."""
    col = tl.arange(0, 16)
    for b in tl.static_range(8):
        blk = base + 20 * b
        dm = tl.load(blk.to(tl.pointer_type(tl.int32)), mask=n_ok, other=0)
        d = _f16_bits(dm & 0xFFFF)
        m = _f16_bits((dm >> 16) & 0xFFFF)
        qs = tl.load(blk[:, None] + 4 + col[None, :], mask=n_ok[:, None], other=0)
        k = k0 + 32 * b
        p_lo, xs_lo = _dot_sub_block(
            qs & 0xF, x_ptr, stride_x, xs_ptr, stride_xs, k, t, t_ok, 16, 0, DOT_DTYPE, MAGIC
        )
        p_hi, xs_hi = _dot_sub_block(
            qs >> 4, x_ptr, stride_x, xs_ptr, stride_xs, k + 16, t, t_ok, 16, 0, DOT_DTYPE, MAGIC
        )
        acc = acc + d[:, None] * (p_lo + p_hi) + m[:, None] * (xs_lo + xs_hi)
    return acc


@triton.jit
def _q4k_super_block_whole(
    acc, base, n_ok, x_ptr, stride_x, k0, t, t_ok, DOT_DTYPE: tl.constexpr, Q5: tl.constexpr = False
):
    """acc += one Q4_K super-block of the program's rows as one K = 256 dot: the weights
    d*sc * q - dmin*m dequantized in registers in the order (group j, byte l, nibble h), so
    column c = 64 j + 2 l + h holds weight 64 j + 32 h + l (a reshape of the joined nibbles, no
    permute), and x is loaded in that order. Q5: a Q5_K super-block (qh[32]@16, qs@48; bit
    2 j + h of qh[l] is the quant's 16)."""
    dsc, dm = q4k_scales_mins(base, n_ok)
    dsc = tl.reshape(dsc, (base.shape[0], 4, 1, 2))
    dm = tl.reshape(dm, (base.shape[0], 4, 1, 2))
    j = tl.arange(0, 4)[None, :, None]
    byte = tl.arange(0, 32)[None, None, :]
    qs = tl.load(base[:, None, None] + (48 if Q5 else 16) + 32 * j + byte, mask=n_ok[:, None, None], other=0)
    q = tl.join(qs & 0xF, qs >> 4)  # [BLOCK_N, 4, 32, 2]: (j, l, h)
    if Q5:
        qh = tl.load(base[:, None, None] + 16 + byte, mask=n_ok[:, None, None], other=0).to(tl.int32)
        bit = 2 * tl.arange(0, 4)[:, None, None] + tl.arange(0, 2)[None, None, :]  # [4, 1, 2]: 2 j + h
        q = q.to(tl.int32) | (((qh[:, :, :, None] >> bit[None, :, :, :]) & 1) << 4)
    q = q.to(tl.float32)
    w = tl.reshape((dsc * q - dm).to(DOT_DTYPE), (base.shape[0], 256))
    c = tl.arange(0, 256)
    k = k0 + 64 * (c // 64) + 32 * (c % 2) + (c % 64) // 2
    x = tl.load(x_ptr + t[None, :] * stride_x + k[:, None], mask=t_ok[None, :], other=0.0)
    return tl.dot(w, x.to(DOT_DTYPE), acc, input_precision="ieee")


@triton.jit
def _q6k_super_block(
    acc,
    base,
    sblk,
    n_ok,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    DOT_DTYPE: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """acc += one Q6_K super-block of the program's rows (256 weights a row; in gguf's layout 210
    bytes at `base` [BLOCK_N], only 2-byte aligned: bytes and one fp16): ql[128]@0 | qh[64]@128
    at `base`, scales int8[16]@192 | d@208 at `sblk` (`gguf_dequant.block_at`). Sub-block s = 8*h + 2*j + g
    (16 weights; half h, quarter j, 16-group g)
    takes nibble j // 2 of ql[64h + 32(j % 2) + 16g : +16] and bits 2j..2j+1 of
    qh[32h + 16g : +16] << 4 (ggml's dequantize_row_q6_K); w = d*scales[s] * (q - 32)."""
    d = tl.load((sblk + 208).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
    col = tl.arange(0, 16)[None, :]
    row_ok = n_ok[:, None]
    for h in tl.static_range(2):
        for g in tl.static_range(2):
            ql_a = tl.load(base[:, None] + 64 * h + 16 * g + col, mask=row_ok, other=0)
            ql_b = tl.load(base[:, None] + 64 * h + 32 + 16 * g + col, mask=row_ok, other=0)
            qh = tl.load(base[:, None] + 128 + 32 * h + 16 * g + col, mask=row_ok, other=0)
            for j in tl.static_range(4):
                ql = ql_a if j % 2 == 0 else ql_b
                low = ql & 0xF if j < 2 else ql >> 4
                q = low | (((qh >> (2 * j)) & 3) << 4)
                s = 8 * h + 2 * j + g
                sc = tl.load((sblk + 192 + s).to(tl.pointer_type(tl.int8)), mask=n_ok, other=0)
                k = k0 + 16 * s
                p, _ = _dot_sub_block(
                    q, x_ptr, stride_x, xs_ptr, stride_xs, k, t, t_ok, 16, 32, DOT_DTYPE, MAGIC
                )
                acc += (d * sc.to(tl.float32))[:, None] * p
    return acc


@triton.jit
def _q6k_half_whole(
    acc, base, sblk, n_ok, x_ptr, stride_x, k0, half: tl.constexpr, t, t_ok, DOT_DTYPE: tl.constexpr
):
    """acc += half `half` (128 weights) of one Q6_K super-block of the program's rows as one
    K = 128 dot: byte l of ql[64 h:], ql[64 h + 32:] and qh[32 h:] holds the quants of weights
    l + 32 i (i = 0..3: low / high nibble of either ql byte, bits 2 i of qh) with scale
    scales[8 h + l // 16 + 2 i]; column c = 4 l + 2 nib + ab holds i = ab + 2 nib (a reshape of
    the joined quants), and x is loaded in that order. w = d*scale * (q - 32), in x's dtype.
    `base` / `sblk`: as in `_q6k_super_block`."""
    N: tl.constexpr = base.shape[0]
    d = tl.load((sblk + 208).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
    byte = tl.arange(0, 32)[None, :]
    row = base[:, None]
    ql_a = tl.load(row + 64 * half + byte, mask=n_ok[:, None], other=0)
    ql_b = tl.load(row + 64 * half + 32 + byte, mask=n_ok[:, None], other=0)
    qh = tl.load(row + 128 + 32 * half + byte, mask=n_ok[:, None], other=0)
    low = tl.join(ql_a & 0xF | ((qh & 3) << 4), (ql_a >> 4) | (((qh >> 4) & 3) << 4))  # i = 0, 2
    high = tl.join(ql_b & 0xF | (((qh >> 2) & 3) << 4), (ql_b >> 4) | (((qh >> 6) & 3) << 4))  # 1, 3
    q = tl.reshape(tl.join(low, high), (N, 2, 16, 2, 2))  # (l // 16, l % 16, nib, ab)
    lg = tl.arange(0, 2)[None, :, None, None, None]
    nib = tl.arange(0, 2)[None, None, None, :, None]
    ab = tl.arange(0, 2)[None, None, None, None, :]
    sc_at = sblk[:, None, None, None, None] + 192 + 8 * half + lg + 2 * (ab + 2 * nib)
    sc = tl.load(sc_at.to(tl.pointer_type(tl.int8)), mask=n_ok[:, None, None, None, None], other=0)
    scale = d[:, None, None, None, None] * sc.to(tl.float32)
    w = tl.reshape((scale * (q.to(tl.float32) - 32.0)).to(DOT_DTYPE), (N, 128))
    c = tl.arange(0, 128)
    k = k0 + 128 * half + c // 4 + 32 * (c % 2 + 2 * ((c // 2) % 2))
    x = tl.load(x_ptr + t[None, :] * stride_x + k[:, None], mask=t_ok[None, :], other=0.0)
    return tl.dot(w, x.to(DOT_DTYPE), acc, input_precision="ieee")


# Grid: (SPLIT_K, row tiles), the split the fast axis, so that a row tile's splits are launched
# side by side and run at once, reading the rows' bytes together. Row tiles first, a tile's
# second split ran a wave or more after its first, and each split reads every SPLIT_K-th 144-byte
# super-block: under ncu (L2 flushed before each kernel) the 8B gate_up at 32 tokens (448 tiles x
# 2 splits) read 113 MB from DRAM for 81 MB of weights and scale pairs, 81 MB split first (60.9 ->
# 55.2 us); the engine's 4 / 8 / 16 / 32 x 2K steps were the same either way (H100,
# bench/results/2026-12-06-h100-split-order/).
@triton.jit
def _row_tile():
    """The program's row tile (grid axis 1)."""
    return tl.program_id(1)


@triton.jit
def _split_index():
    """The program's split along K (grid axis 0): it takes super-blocks split, split + SPLIT_K, ..."""
    return tl.program_id(0)


@triton.jit
def _tile(rows, num_tokens, BLOCK_N: tl.constexpr, T_PAD: tl.constexpr):
    """The program's output tile: rows n [BLOCK_N] (n_ok: < rows) and tokens t [T_PAD] (t_ok)."""
    n = _row_tile() * BLOCK_N + tl.arange(0, BLOCK_N)
    t = tl.arange(0, T_PAD)
    return n, n < rows, t, t < num_tokens


@triton.jit
def _read_rows(n, rows):
    """The weight row each of the tile's rows n reads: its own, or the last one past the end (read
    and never stored), so the words form's loads need no mask: masked loads were 128 of the Q6_K
    loop's 828 SASS instructions a super-block (predicates, zero fills; sm_90, compiled by Triton
    3.9 on the dev host)."""
    return tl.minimum(n, rows - 1).to(tl.int64)


@triton.jit
def _store(
    acc,
    bias_ptr,
    out_ptr,
    part_ptr,
    counter_ptr,
    stride_o,
    rows,
    num_tokens,
    n,
    n_ok,
    t,
    t_ok,
    SPLIT_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    IN_ORDER: tl.constexpr,
):
    """out[t, n] = acc^T (+ bias). SPLIT_K > 1: the splits added in order (IN_ORDER, the words
    form: `_store_reduced`) or by fp32 atomics (the bias added by the first split only)."""
    if SPLIT_K > 1 and IN_ORDER:
        _store_reduced(
            acc,
            bias_ptr,
            out_ptr,
            part_ptr,
            counter_ptr,
            stride_o,
            rows,
            num_tokens,
            n,
            n_ok,
            t,
            t_ok,
            SPLIT_K,
            HAS_BIAS,
        )
    else:
        if HAS_BIAS:
            if _split_index() == 0:
                acc += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        out = out_ptr + t[None, :] * stride_o + n[:, None]
        mask = n_ok[:, None] & t_ok[None, :]
        if SPLIT_K == 1:
            tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            tl.atomic_add(out, acc, mask=mask, sem="relaxed")


@triton.jit
def _store_reduced(
    acc,
    bias_ptr,
    out_ptr,
    part_ptr,
    counter_ptr,
    stride_o,
    rows,
    num_tokens,
    n,
    n_ok,
    t,
    t_ok,
    SPLIT_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """SPLIT_K > 1 without atomics on the output: each split stores its fp32 partial [tokens, rows]
    plane of `part_ptr`, and the last split of the row tile to arrive (the tile's counter, zeroed
    by `words_x` before this kernel) adds the planes in split order, so the sum, and the tokens
    that come of it, are the same on every run; it writes out (+ bias) in out's dtype, so no zero
    fill or cast kernel comes with the call. The barrier orders all threads' partial stores before
    thread 0's atomic (Triton issues a scalar atomic once), whose release publishes them; the last
    split's acquire reaches its threads through Triton's broadcast of the atomic's result."""
    offsets = t[None, :] * rows + n[:, None]
    mask = n_ok[:, None] & t_ok[None, :]
    plane = rows * num_tokens
    tl.store(part_ptr + _split_index() * plane + offsets, acc, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr + _row_tile(), 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = tl.zeros_like(acc)
        for split in tl.static_range(SPLIT_K):
            total += tl.load(part_ptr + split * plane + offsets, mask=mask, other=0.0, cache_modifier=".cg")
        if HAS_BIAS:
            total += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + t[None, :] * stride_o + n[:, None], total.to(out_ptr.dtype.element_ty), mask=mask)


# The two kernels differ in the super-block's bytes and arithmetic only; they stay two so that a
# profile names each type's time (an 8-sequence step: Q4_K 3.98 ms, Q6_K 2.93; bench/results/
# 2026-12-02-h200-q4km-peer/). Q5_K and Q4_1 (never in one model with Q4_K's own kernel time to
# tell apart) run the first with a flag. Grid: (SPLIT_K, cdiv(rows, BLOCK_N)). Program (s, i) takes
# rows [i*BLOCK_N, +BLOCK_N) and the super-blocks s, s + SPLIT_K, ...; x_sums [tokens, K / 32]
# (Q4_K, Q5_K) or [tokens, K / 16] (Q6_K, Q4_1).
@triton.jit
def _q4k_mma_kernel(
    x_ptr,
    xs_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    num_tokens,
    stride_x,
    stride_xs,
    stride_w,
    stride_o,
    part_ptr,  # the words form with SPLIT_K > 1: fp32 partials [SPLIT_K, tokens, rows]
    counter_ptr,  # and the row tiles' arrival counters, zeroed by words_x
    pairs_ptr,  # Q4_K's words form with PAIR_DTYPE: pack_scales' pairs, int32 [rows, K / 32]
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    WHOLE: tl.constexpr = False,
    WORDS: tl.constexpr = False,
    TWO_ACC: tl.constexpr = False,
    PDL: tl.constexpr = False,
    PAIR_DTYPE: tl.constexpr = None,
    Q5: tl.constexpr = False,  # Q5_K rows (176-byte super-blocks): the sub-block and whole forms
    Q41: tl.constexpr = False,  # Q4_1 rows, 8 blocks (160 bytes) a super-block: the sub-block form
):
    pdl_wait(PDL)  # the launch overlaps the kernel before (x comes from it: nothing read earlier)
    n, n_ok, t, t_ok = _tile(rows, num_tokens, BLOCK_N, T_PAD)
    row_ptr = w_ptr + _read_rows(n, rows) * stride_w
    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    for sb in range(_split_index(), num_blocks, SPLIT_K):
        base = row_ptr + sb * (160 if Q41 else 176 if Q5 else 144)
        if WORDS:
            acc, acc2 = q4k_super_block_words(
                acc,
                acc2,
                base,
                xs_ptr,
                sb,
                t,
                T_PAD,
                DOT_DTYPE,
                DOT_DTYPE != tl.float32,
                TWO_ACC,
                pairs_ptr + _read_rows(n, rows) * (num_blocks * 8),
                PAIR_DTYPE,
            )
        elif WHOLE:
            acc = _q4k_super_block_whole(acc, base, n_ok, x_ptr, stride_x, sb * 256, t, t_ok, DOT_DTYPE, Q5)
        else:
            acc = _q4k_super_block(
                acc,
                base,
                n_ok,
                x_ptr,
                stride_x,
                xs_ptr,
                stride_xs,
                sb * 256,
                t,
                t_ok,
                DOT_DTYPE,
                MAGIC,
                Q5,
                Q41,
            )
    _store(
        acc + acc2 if TWO_ACC else acc,
        bias_ptr,
        out_ptr,
        part_ptr,
        counter_ptr,
        stride_o,
        rows,
        num_tokens,
        n,
        n_ok,
        t,
        t_ok,
        SPLIT_K,
        HAS_BIAS,
        WORDS,
    )


@triton.jit
def _q6k_mma_kernel(
    x_ptr,
    xs_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    num_tokens,
    stride_x,
    stride_xs,
    stride_w,
    stride_o,
    part_ptr,  # the words form with SPLIT_K > 1: fp32 partials [SPLIT_K, tokens, rows]
    counter_ptr,  # and the row tiles' arrival counters, zeroed by words_x
    pairs_ptr,  # Q4_K's words form with PAIR_DTYPE: pack_scales' pairs, int32 [rows, K / 32]
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    WHOLE: tl.constexpr = False,
    WORDS: tl.constexpr = False,
    TWO_ACC: tl.constexpr = False,
    PDL: tl.constexpr = False,
    PAIR_DTYPE: tl.constexpr = None,
    SPLIT: tl.constexpr = False,  # the weight's rows in the split layout (gguf_formats.split_q6k_rows)
):
    pdl_wait(PDL)
    n, n_ok, t, t_ok = _tile(rows, num_tokens, BLOCK_N, T_PAD)
    row_ptr = w_ptr + _read_rows(n, rows) * stride_w
    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    for sb in range(_split_index(), num_blocks, SPLIT_K):
        base, sblk = block_at(row_ptr, sb, num_blocks, 210, SPLIT)
        if WORDS:
            acc, acc2 = q6k_super_block_words(acc, acc2, base, sblk, xs_ptr, sb, t, T_PAD, DOT_DTYPE, TWO_ACC)
        elif WHOLE:
            for half in tl.static_range(2):
                acc = _q6k_half_whole(
                    acc, base, sblk, n_ok, x_ptr, stride_x, sb * 256, half, t, t_ok, DOT_DTYPE
                )
        else:
            acc = _q6k_super_block(
                acc,
                base,
                sblk,
                n_ok,
                x_ptr,
                stride_x,
                xs_ptr,
                stride_xs,
                sb * 256,
                t,
                t_ok,
                DOT_DTYPE,
                MAGIC,
            )
    _store(
        acc + acc2 if TWO_ACC else acc,
        bias_ptr,
        out_ptr,
        part_ptr,
        counter_ptr,
        stride_o,
        rows,
        num_tokens,
        n,
        n_ok,
        t,
        t_ok,
        SPLIT_K,
        HAS_BIAS,
        WORDS,
    )


# Per type: (kernel, weights a sub-block, so a column of x_sums).
_KERNELS = {
    "Q4_K": (_q4k_mma_kernel, 32),
    "Q5_K": (_q4k_mma_kernel, 32),
    "Q6_K": (_q6k_mma_kernel, 16),
    "Q4_1": (_q4k_mma_kernel, 16),
}


def mma_t_pad(num_tokens: int) -> int:
    """The token tile of `num_tokens`: 8 at least (an mma.sync tile is 8 tokens wide)."""
    return max(8, triton.next_power_of_2(num_tokens))


def check_mma_args(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> None:
    """The shape, type, layout and device contract of `quant_matmul_mma` (asserts only)."""
    assert weight.qtype in MMA_TYPES, f"the tensor-core kernel takes {MMA_TYPES}, got {weight.qtype}"
    assert x.dim() == 2 and x.stride(1) == 1, f"x must be [num_tokens, in_features], got {tuple(x.shape)}"
    assert 1 <= x.shape[0] <= MMA_MAX_TOKENS, f"1..{MMA_MAX_TOKENS} tokens, got {x.shape[0]}"
    assert x.shape[1] == weight.in_features, f"x has {x.shape[1]} features, weight {weight.in_features}"
    assert x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"unsupported x dtype {x.dtype}"
    assert x.device == weight.device, f"x on {x.device}, weight on {weight.device}"
    assert rows_aligned(weight), f"{weight.qtype} rows must be {ROW_ALIGN[weight.qtype]}-byte aligned"
    assert weight.in_features % 256 == 0, (
        f"in_features {weight.in_features}: a multiple of 256 (super-blocks)"
    )
    if bias is not None:
        assert bias.shape == (weight.out_features,) and bias.device == x.device, "bias must be [out_features]"


def _outputs(
    x: torch.Tensor, rows: int, cfg: MmaConfig, dest: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, part, counters) of one call: out in x's dtype (`dest` where given), or zeroed fp32
    for split K by atomics (the sub-block and whole forms); the words form's split K gets fp32
    partials [split_k, tokens, rows] and a counter a row tile (zeroed by words_x); unused ones are
    `out`."""
    num_tokens = x.shape[0]
    atomics = cfg.split_k > 1 and not cfg.words
    if dest is not None and not atomics:
        out = dest
    else:
        out = torch.empty((num_tokens, rows), dtype=torch.float32 if atomics else x.dtype, device=x.device)
    if atomics:
        out.zero_()
    if not (cfg.words and cfg.split_k > 1):
        return out, out, out
    part = torch.empty((cfg.split_k, num_tokens, rows), dtype=torch.float32, device=x.device)
    counters = torch.empty(triton.cdiv(rows, cfg.block_n), dtype=torch.int32, device=x.device)
    return out, part, counters


def _dot_dtype(x: torch.Tensor) -> tl.dtype:
    """The tensor cores' operand type: x's half type; fp32 for fp32 x and under the interpreter."""
    if x.dtype == torch.float32 or x.device.type == "cpu":
        return tl.float32
    return tl.float16 if x.dtype == torch.float16 else tl.bfloat16


def _scale_pairs(weight: QuantizedWeight, cfg: MmaConfig, x: torch.Tensor) -> torch.Tensor | None:
    """The weight's `scale_pairs` as the words form reads them (int32 [rows, K / 32]), where that
    form runs and they are in x's dtype; else None (the header's scales)."""
    pairs = weight.scale_pairs
    if not cfg.words or pairs is None or pairs.dtype != x.dtype:
        return None
    return pairs.view(torch.int32)


def _form_flags(cfg: MmaConfig, x: torch.Tensor, paired: bool) -> dict[str, object]:
    """The kernel's form constexprs that differ from their defaults (each value a compiled variant)."""
    forms = {"WHOLE": cfg.whole, "WORDS": cfg.words, "TWO_ACC": cfg.two_acc}
    flags: dict[str, object] = {name: True for name, on in forms.items() if on}
    if paired:
        flags["PAIR_DTYPE"] = tl.float16 if x.dtype == torch.float16 else tl.bfloat16
    return flags


def _type_flags(weight: QuantizedWeight) -> dict[str, bool]:
    """The kernel's constexprs for the weight's type and layout (each a compiled variant): Q6_K's
    split rows, Q5_K's and Q4_1's blocks in the Q4_K kernel."""
    flags = {"SPLIT": weight.split, "Q5": weight.qtype == "Q5_K", "Q41": weight.qtype == "Q4_1"}
    return {name: True for name, on in flags.items() if on}


def _x_side(
    x: torch.Tensor,
    qtype: str,
    cfg: MmaConfig,
    t_pad: int,
    counters: torch.Tensor | None,
    sub: int,
    gated: bool,
) -> torch.Tensor:
    """What the kernel reads beside x (its `xs_ptr`): the words form's permuted x (`words_x`, which
    zeroes the split counters and, gated, applies the SiLU); else each sub-block's sum of x per
    token, which the min term (Q4_K), the -32 offset (Q6_K) and the magic form's 128 * sum(x) need,
    in one reduce kernel (x.float() first added a copy per call: 128 a step of an 8B); the
    whole-super-block form folds them into its weights (x itself, unused)."""
    if cfg.words:
        return words_x(x, qtype, t_pad, counters, gated)
    if cfg.whole:
        return x
    return torch.sum(x.view(x.shape[0], -1, sub), dim=-1, dtype=torch.float32)


def quant_matmul_mma(
    x: torch.Tensor,  # [num_tokens <= MMA_MAX_TOKENS, in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
    config: MmaConfig | None = None,
    out: torch.Tensor | None = None,  # where to write it: [num_tokens, out_features], rows may be strided
    gated: bool = False,  # x is [num_tokens, 2 * in_features], gate then up: silu(gate) * up @ W.T
) -> torch.Tensor:
    """Triton tensor-core x @ W.T (+ bias) -> [num_tokens, out_features] in x's dtype (`out`
    where given: a column slice of a wider output, so a fused projection of several types needs
    no concatenation). The words form reads a Q4_K weight's `scale_pairs` when they are in x's
    dtype (the same products: the pairs are the values the asm rounds the header's scales to).
    `gated` (an MLP's down projection): the words form's x permutation also applies the SiLU, one
    launch for both; the other forms run `silu_and_mul` first."""
    num_tokens, rows = x.shape[0], weight.out_features
    cfg = config or mma_config(weight, num_tokens) or MmaConfig(block_n=32, num_warps=4)
    if gated and not cfg.words:
        return quant_matmul_mma(silu_and_mul(x), weight, bias, config, out)
    check_mma_args(x[:, : x.shape[1] // 2] if gated else x, weight, bias)
    check_out(out, x, weight.out_features)
    t_pad = mma_t_pad(num_tokens)
    cfg = for_shape(cfg, rows, weight.in_features) if cfg.sb_per_split else cfg
    assert not (cfg.words and weight.qtype not in WORDS_TYPES), f"{weight.qtype} has no words form"
    assert not (cfg.whole and weight.qtype not in WHOLE_TYPES), f"{weight.qtype} has no whole form"
    result, part, counters = _outputs(x, rows, cfg, out)
    grid = (cfg.split_k, triton.cdiv(rows, cfg.block_n))
    kernel, sub = _KERNELS[weight.qtype]
    pairs = _scale_pairs(weight, cfg, x)
    x_sums = _x_side(x, weight.qtype, cfg, t_pad, counters if counters is not result else None, sub, gated)
    kernel[grid](
        x,
        x_sums,
        weight.data,
        bias if bias is not None else x,
        result,
        rows,
        weight.in_features // 256,
        num_tokens,
        x.stride(0),
        x_sums.stride(0),
        weight.data.stride(0),
        result.stride(0),
        part,
        counters,
        pairs if pairs is not None else x,
        T_PAD=t_pad,
        BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k,
        MAGIC=cfg.magic,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=_dot_dtype(x),
        **_form_flags(cfg, x, pairs is not None),
        **_type_flags(weight),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **pdl_meta(x.device),
    )
    if result.dtype == x.dtype:
        return result
    return result.to(x.dtype) if out is None else out.copy_(result)
