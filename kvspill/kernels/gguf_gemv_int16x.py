"""The one-token Q4_K and Q6_K GEMVs on int16 x (dp2a): gguf_gemv's lanes with integer dot
products (kernels/gguf_gemv.py dispatches to them; `KVSPILL_INT16_X=0` takes the float lanes
instead). The Q6_K kernel rounds x per 4 values (a lane's columns): compiled for sm_90 it has
12-17% fewer SASS instructions than the float Q6_K lanes, a smaller cut than Q4_K's, and on an
H200 it was 1% faster (bench/results/2026-12-03-h200-int16x-engine). Its lanes take CHUNK // 256
blocks of a row side by side, where the float lanes unroll pairs of blocks one after the other:
all of a step's loads are in flight before their sums, which a weight of few rows (too few
programs to fill the card) needs: the 8B down 27.5 -> 23.8 us, v 4.6 -> 3.4 (H200,
bench/results/2026-12-04-h200-q6k-side-by-side; `gguf_gemv.Q6K_INT16X_CONFIGS`).

The Q4_K kernel's lane owns half of one 32-byte group of a super-block (16 bytes: 4 words, 32
weights, 16 of each of the group's two sub-blocks) for all BLOCK_N rows it holds, so a warp's
quant load is 16 contiguous bytes a lane, 4 super-blocks' quants. Owning a whole group (8 bytes a
lane a load, a warp's load across 32 groups and 9-10 lines), the 8B shapes qkv / q+k / o /
gate_up / down took 6.94 / 7.16 / 5.92 / 23.24 / 13.18 us, now 5.78 / 5.69 / 5.20 / 21.58 / 13.45,
and the engine's step at 8K 2.967 -> 2.859 ms (H200, bench/results/2026-12-04-h200-q4k-half-lanes),
where 31% fewer instructions, more occupancy and prefetching had changed nothing
(bench/results/2026-12-04-h200-q6k-few-rows). Each lane rounds its 16 + 16 x values in registers,
per 16 (Q4K_X_GROUP), to integers of 14 bits: xq = round(x * 2**-e), the power of two 2**e that
puts the 16 values' amax in [2**13, 2**14) (no division, so the rounding is the same everywhere:
GPU, Triton's interpreter, `q4k_int16x_ref`). A weight word then takes two ANDs (low nibbles; the
high ones stay in place, 16 q) and four dp2a for its 8 weights. Per sub-block half

    sum_l (sc * q_l - m) * x_l  ~=  sc * 2**e * sum_l q_l * xq_l  -  m * sum_l x_l,

the min term on the exact sum of x. |x - 2**e xq| <= 2**e / 2 <= 2**-14 amax: below bf16's own
rounding of the group's largest value (2**-9 of it), so the kernel is as exact as the float lanes
for bf16 / fp16 x (quality: `python -m kvspill.bench.int16x_quality`). Under Triton's interpreter
the PTX has a plain-Triton twin.

Invariant: the result equals `q4k_int16x_ref` (the same x rounding, exact integer sums) to fp32
rounding of the scaled terms.
"""

from __future__ import annotations

import torch

from kvspill.kernels.gguf_dequant import block_at
from kvspill.kernels.gguf_formats import q4k_fields, q6k_fields, q41_fields, q80_fields
from kvspill.kernels.gguf_gemv_lane import (
    _f16_bits,
    _q4k_decode,
    _q6k_token_lanes,
    _q6k_weight_lanes,
    _split4,
    _store_lane_sums,
    _to_f32,
    load_q6k_word,
    q6k_quant_bytes,
)
from kvspill.kernels.gguf_gemv_offset import q4k_one_token_lanes
from kvspill.kernels.norm_handoff import add_into_stream, handed_rstd, load_handed_sums
from kvspill.kernels.pdl import LANE_PREFETCH_LINES, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton

# 1.5 * 2**23: fma(x, 2**-e, MAGIC) rounds x * 2**-e (|.| < 2**22) to an integer held in the
# float's low mantissa bits, two's complement: the low half is the int16, no float-to-int convert.
_ROUND_MAGIC = tl.constexpr(12582912.0)
# xq's largest magnitude is below 2**X_BITS (amax * 2**-e in [2**13, 2**14)).
X_BITS = 14
# The Q4_K kernel's x values a rounding scale (a lane's share of a sub-block).
Q4K_X_GROUP = 16


@triton.jit
def q4k_int16x_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    stride_x,  # TWO: the second token's row of x and of out
    stride_o,
    HAS_LINEAR_BIAS: tl.constexpr,
    SB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr = False,
    Q5: tl.constexpr = False,  # Q5_K rows: 176-byte super-blocks, a fifth bit a quant from qh
    TWO: tl.constexpr = False,  # two tokens, each super-block's bytes read from HBM once
    sums_ptr=None,  # fusion (one token): fp8_gemv.GemvFusion's sums / residual / handoff
    num_sums=1,
    eps=0.0,
    hand_w_ptr=None,
    scaled_ptr=None,
    part_ptr=None,
    SUMS: tl.constexpr = False,
    SUMS_PAD: tl.constexpr = 1,
    RESIDUAL: tl.constexpr = False,
    HANDOFF: tl.constexpr = False,
):
    # Q4_K (or Q5_K), one token (or TWO). Grid: (cdiv(rows, BLOCK_N),).
    q4k_int16x_program(
        tl.program_id(0),
        x_ptr,
        w_ptr,
        bias_ptr,
        out_ptr,
        rows,
        num_blocks,
        stride_w,
        stride_x,
        stride_o,
        HAS_LINEAR_BIAS,
        SB,
        BLOCK_N,
        USE_ASM,
        PDL,
        Q5,
        TWO,
        sums_ptr,
        num_sums,
        eps,
        hand_w_ptr,
        scaled_ptr,
        part_ptr,
        SUMS,
        SUMS_PAD,
        RESIDUAL,
        HANDOFF,
    )


@triton.jit
def q4k_int16x_program(
    pid,
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    stride_x,
    stride_o,
    HAS_LINEAR_BIAS: tl.constexpr,
    SB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr,
    Q5: tl.constexpr,
    TWO: tl.constexpr,
    sums_ptr=None,  # fusion (one token): fp8_gemv.GemvFusion's sums / residual / handoff
    num_sums=1,
    eps=0.0,
    hand_w_ptr=None,
    scaled_ptr=None,
    part_ptr=None,
    SUMS: tl.constexpr = False,
    SUMS_PAD: tl.constexpr = 1,
    RESIDUAL: tl.constexpr = False,
    HANDOFF: tl.constexpr = False,
):
    """q4k_int16x_kernel's program `pid` (rows [pid * BLOCK_N, +BLOCK_N)): lane kl = 8 *
    (super-block) + 2 g + hh of the K step (SB super-blocks) owns half hh (16 bytes) of group g of
    each of the program's rows (Q5_K: and the 16 qh bytes of the same 16 columns) and the 16 + 16 x
    values they meet. TWO runs each step again for the second token, its words from L1 (as
    q41_int16x_kernel's)."""
    KL: tl.constexpr = 8 * SB
    row, sb_w, g, hh, i_x, x_off = q4k_one_token_lanes(w_ptr, pid, rows, stride_w, BLOCK_N, KL, PDL, 2)
    sums = load_handed_sums(sums_ptr, num_sums, SUMS_PAD) if SUMS else 0.0  # after the PDL wait
    acc = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, KL), dtype=tl.float32)  # TWO's second token (else unused)
    for k in range(0, num_blocks, SB):
        sb_bytes = tl.where((k + sb_w) < num_blocks, (k + sb_w) * (176 if Q5 else 144), 0)
        words = (row + sb_bytes).to(tl.pointer_type(tl.int32))
        x_ok = (k + i_x // 8) < num_blocks
        acc += _q4k_int16x_step(words, g, hh, x_ptr + k * 256 + x_off, x_ok, BLOCK_N, KL, USE_ASM, Q5)
        if TWO:
            x2 = x_ptr + stride_x + k * 256 + x_off
            acc2 += _q4k_int16x_step(words, g, hh, x2, x_ok, BLOCK_N, KL, USE_ASM, Q5)
    _store_lane_acc(
        out_ptr,
        bias_ptr,
        acc,
        pid,
        rows,
        BLOCK_N,
        HAS_LINEAR_BIAS,
        RESIDUAL,
        HANDOFF,
        hand_w_ptr,
        scaled_ptr,
        part_ptr,
        handed_rstd(sums, num_blocks * 256, eps) if SUMS else 1.0,
    )
    if TWO:
        _store_lane_acc(out_ptr + stride_o, bias_ptr, acc2, pid, rows, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def _store_lane_acc(
    out_ptr,
    bias_ptr,
    acc,
    pid,
    rows,
    BLOCK_N: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    RESIDUAL: tl.constexpr = False,
    HANDOFF: tl.constexpr = False,
    hand_w_ptr=None,
    scaled_ptr=None,
    part_ptr=None,
    rstd=1.0,
):
    """One token's output row of the program's rows: the lanes' partial sums acc [BLOCK_N, KL]
    summed over the lanes, times rstd (a handed-off norm's, else 1: scaling the [BLOCK_N] sums,
    not the partials, saves a multiply a partial) (+ bias), stored at out_ptr; RESIDUAL: added
    into it (the residual stream, rounded as the RMSNorm kernel's add rounds), HANDOFF: then the
    next norm's part (norm_handoff.NormHandoff)."""
    out = tl.reshape(tl.sum(acc, axis=1), (1, BLOCK_N)) * rstd
    if not RESIDUAL:
        _store_lane_sums(out_ptr, bias_ptr, out, pid, rows, 0, 1, 1, BLOCK_N, HAS_LINEAR_BIAS)
    else:
        n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = n < rows
        if HAS_LINEAR_BIAS:
            out += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        y = out.to(out_ptr.dtype.element_ty)
        add_into_stream(y, n, n_ok, pid, out_ptr, hand_w_ptr, scaled_ptr, part_ptr, HANDOFF)


@triton.jit
def _q4k_int16x_step(
    words,
    g,
    hh,
    x_ptrs,
    x_ok,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
    Q5: tl.constexpr,
):
    """One K step: each lane's half hh of group g (`words` at its super-block, [BLOCK_N * KL, 1]
    int32 pointers; quant words 4 hh .. 4 hh + 3 of the group; Q5_K: qh words 4 hh .. 4 hh + 3, whose
    bits 2 g and 2 g + 1 are the fifth bits of the group's two sub-blocks) against the 16 + 16 x
    values they meet (`x_ptrs` [KL, 8] at the first 8) -> the lane's [BLOCK_N, KL] share of the output."""
    h0, h1, h2, h3 = _split4(tl.load(words + tl.arange(0, 4)[None, :]))
    sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, 16 * (g % 2), g < 2)
    xl0, xl1, inv_lo, dx_lo, sum_lo = _load_half_x(x_ptrs, x_ok, USE_ASM)
    xh0, xh1, inv_hi, dx_hi, sum_hi = _load_half_x(x_ptrs + 32, x_ok, USE_ASM)
    pair = tl.arange(0, 2)[None, :]
    q_words = words + (12 if Q5 else 4) + g * 8 + hh * 4 + pair
    qh_words = words + 4 + hh * 4 + pair  # Q5_K's qh[16 hh .. 16 hh + 15] (unread for Q4_K)
    i_lo = tl.zeros((BLOCK_N, KL, 2), dtype=tl.int32)
    i_hi = tl.zeros((BLOCK_N, KL, 2), dtype=tl.int32)
    i_lo, i_hi = _dp2a_step(
        i_lo, i_hi, q_words, qh_words, 2 * g, xl0, xh0, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM, Q5
    )
    i_lo, i_hi = _dp2a_step(
        i_lo, i_hi, q_words + 2, qh_words + 2, 2 * g, xl1, xh1, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM, Q5
    )
    return _q4k_lane_part(
        sc_lo, sc_hi, mn_lo, mn_hi, dx_lo, dx_hi, sum_lo, sum_hi, i_lo, i_hi, BLOCK_N, KL, Q5
    )


@triton.jit
def _q4k_lane_part(
    sc_lo,
    sc_hi,
    mn_lo,
    mn_hi,
    dx_lo,
    dx_hi,
    sum_lo,
    sum_hi,
    i_lo,
    i_hi,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    Q5: tl.constexpr,
):
    """A K step's [BLOCK_N, KL] share of the output from each lane's integer sums (i_lo, i_hi
    [BLOCK_N, KL, 2]), its sub-blocks' scales and mins, and its x halves' 2**e and exact sums."""
    shape: tl.constexpr = (BLOCK_N, KL)
    lane: tl.constexpr = (1, KL)
    # Q4_K's i_hi holds 16 * q of the high nibbles (masked in place, not shifted down); Q5_K's q.
    hi_unit: tl.constexpr = 1.0 if Q5 else 0.0625
    part = tl.reshape(sc_lo, shape) * tl.reshape(dx_lo, lane) * tl.sum(i_lo, axis=2).to(tl.float32)
    part += tl.reshape(sc_hi, shape) * tl.reshape(dx_hi * hi_unit, lane) * tl.sum(i_hi, axis=2).to(tl.float32)
    part -= tl.reshape(mn_lo, shape) * tl.reshape(sum_lo, lane)
    part -= tl.reshape(mn_hi, shape) * tl.reshape(sum_hi, lane)
    return part


@triton.jit
def q41_int16x_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    stride_x,  # TWO: the second token's row of x and of out
    stride_o,
    HAS_LINEAR_BIAS: tl.constexpr,
    KL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr = False,
    TWO: tl.constexpr = False,  # two tokens, each block's bytes read from HBM once
):
    # Q4_1 (what int4 checkpoints, AWQ and GPTQ, load as), one token (or TWO). Grid:
    # (cdiv(rows, BLOCK_N),). Lane kl of a K step (KL blocks of 32) owns block k + kl of each of the
    # program's rows: its header word (d | m << 16) and 4 quant words, whose 16 low nibbles meet
    # the block's x[0:16] and high ones x[16:32]: Q4_K's half-group lane with a header of its own.
    # TWO runs the block again for the second token: its words come from L1, and the one-token
    # form compiles as it did (loading the words once for both kept more registers live:
    # AOT counts in bench/results/2026-12-05-h200-q41-configs, "Two-token lanes").
    pid = tl.program_id(0)
    row, kl, i_x = _block_lanes(w_ptr, pid, rows, stride_w, BLOCK_N, KL, PDL)
    x_off = i_x * 32 + tl.arange(0, 8)[None, :]
    acc = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, KL), dtype=tl.float32)  # TWO's second token (else unused)
    for k in range(0, num_blocks, KL):
        words = (row + tl.where((k + kl) < num_blocks, (k + kl) * 20, 0)).to(tl.pointer_type(tl.int32))
        x_ok = (k + i_x) < num_blocks
        acc += _q41_int16x_block(words, x_ptr + k * 32 + x_off, x_ok, BLOCK_N, KL, USE_ASM)
        if TWO:
            acc2 += _q41_int16x_block(words, x_ptr + stride_x + k * 32 + x_off, x_ok, BLOCK_N, KL, USE_ASM)
    _store_lane_acc(out_ptr, bias_ptr, acc, pid, rows, BLOCK_N, HAS_LINEAR_BIAS)
    if TWO:
        _store_lane_acc(out_ptr + stride_o, bias_ptr, acc2, pid, rows, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def _block_lanes(w_ptr, pid, rows, stride_w, BLOCK_N: tl.constexpr, KL: tl.constexpr, PDL: tl.constexpr):
    """The Q4_1 and Q8_0 lanes' places after the program's rows are prefetched and the previous
    kernel waited for: each lane item's row pointer and K-step slot kl ([BLOCK_N * KL, 1], item
    r * KL + kl), and the slots as [KL, 1] (x's side). Rows past the end read row 0 (not stored);
    the kernels send items past the end to item 0, where they meet x = 0."""
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]
    n = pid * BLOCK_N + i_w // KL
    row = w_ptr + tl.where(n < rows, n, 0).to(tl.int64) * stride_w
    return row, i_w % KL, tl.arange(0, KL)[:, None]


@triton.jit
def _q41_int16x_block(words, x_ptrs, x_ok, BLOCK_N: tl.constexpr, KL: tl.constexpr, USE_ASM: tl.constexpr):
    """One Q4_1 block a lane (`words` [BLOCK_N * KL, 1] int32 pointers at the rows' blocks) against
    its 32 x values (`x_ptrs` [KL, 8] at the first) -> [BLOCK_N, KL]:
        sum_l (d * q_l + m) * x_l  ~=  d * (2**e_lo * sum_lo q xq + 2**e_hi * sum_hi q xq) + m * sum_l x_l."""
    header = tl.load(words)
    d = tl.reshape(_f16_bits(header & 0xFFFF), (BLOCK_N, KL))
    m = tl.reshape(_f16_bits((header >> 16) & 0xFFFF), (BLOCK_N, KL))
    xl0, xl1, inv_lo, dx_lo, sum_lo = _load_half_x(x_ptrs, x_ok, USE_ASM)
    xh0, xh1, inv_hi, dx_hi, sum_hi = _load_half_x(x_ptrs + 16, x_ok, USE_ASM)
    q_words = words + 1 + tl.arange(0, 2)[None, :]
    i_lo = tl.zeros((BLOCK_N, KL, 2), dtype=tl.int32)
    i_hi = tl.zeros((BLOCK_N, KL, 2), dtype=tl.int32)
    i_lo, i_hi = _dp2a_step(
        i_lo, i_hi, q_words, q_words, 0, xl0, xh0, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM, False
    )
    i_lo, i_hi = _dp2a_step(
        i_lo, i_hi, q_words + 2, q_words + 2, 0, xl1, xh1, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM, False
    )
    lane: tl.constexpr = (1, KL)
    # i_hi holds 16 * q of the high nibbles (masked in place, not shifted down).
    q_part = tl.reshape(dx_lo, lane) * tl.sum(i_lo, axis=2).to(tl.float32)
    q_part += tl.reshape(dx_hi * 0.0625, lane) * tl.sum(i_hi, axis=2).to(tl.float32)
    return d * q_part + m * tl.reshape(sum_lo + sum_hi, lane)


@triton.jit
def q80_int16x_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_pairs,
    stride_w,
    stride_x,  # TWO: the second token's row of x and of out
    stride_o,
    HAS_LINEAR_BIAS: tl.constexpr,
    KL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr = False,
    TWO: tl.constexpr = False,  # two tokens, each pair's bytes read from HBM once (as Q4_1's)
):
    # Q8_0 rows of an even block count (4-byte aligned), one token (or TWO). Grid:
    # (cdiv(rows, BLOCK_N),). Lane kl of a K step (KL pairs of blocks) owns pair k + kl of each of
    # the program's rows: 17 words, 68 bytes (d0 | q0[32] | d1 | q1[32]). Block 1's quants are word
    # aligned; block 0's start 2 bytes into a word, so its words meet x shifted by 2 instead
    # (`_q80_int16x_pair`).
    pid = tl.program_id(0)
    row, kl, i_x = _block_lanes(w_ptr, pid, rows, stride_w, BLOCK_N, KL, PDL)
    acc = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, KL), dtype=tl.float32)  # TWO's second token (else unused)
    for k in range(0, num_pairs, KL):
        words = (row + tl.where((k + kl) < num_pairs, (k + kl) * 68, 0)).to(tl.pointer_type(tl.int32))
        x_ok = (k + i_x) < num_pairs
        acc += _q80_int16x_pair(words, x_ptr + (k + i_x) * 64, x_ok, BLOCK_N, KL, USE_ASM)
        if TWO:
            acc2 += _q80_int16x_pair(words, x_ptr + stride_x + (k + i_x) * 64, x_ok, BLOCK_N, KL, USE_ASM)
    _store_lane_acc(out_ptr, bias_ptr, acc, pid, rows, BLOCK_N, HAS_LINEAR_BIAS)
    if TWO:
        _store_lane_acc(out_ptr + stride_o, bias_ptr, acc2, pid, rows, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def _q80_int16x_pair(words, x_pair, x_ok, BLOCK_N: tl.constexpr, KL: tl.constexpr, USE_ASM: tl.constexpr):
    """Two Q8_0 blocks a lane (`words` [BLOCK_N * KL, 1] int32 pointers at the rows' pairs) against
    their 64 x values (`x_pair` [KL, 1] at the first) -> [BLOCK_N, KL], x rounded per 16 values as
    in the other lanes (4 halves h, 2**e_h):
        d0 * (2**e_0 * sum q xq + 2**e_1 * ...) + d1 * (2**e_2 * ... + 2**e_3 * ...).
    Word j < 8 holds bytes 4 j .. 4 j + 3 of the pair: block 0's quants 4 j - 2 .. 4 j + 1 (word 0:
    d0, then quants 0-1), so its dp2a meets x0[4 j - 2 ..] (x before the block is 0, against d0);
    word 4's bytes 0-1 are the first half's last two quants, its bytes 2-3 the second's first
    two; word 8 holds quants 30-31 and d1 (against x = 0); words 9-16 block 1's quants as they are."""
    cols = tl.arange(0, 32)[None, :]
    x0 = _to_f32(tl.load(x_pair + cols, mask=x_ok, other=0.0), USE_ASM)  # [KL, 32]
    x1 = _to_f32(tl.load(x_pair + 32 + cols, mask=x_ok, other=0.0), USE_ASM)
    shifted = _to_f32(tl.load(x_pair - 2 + cols, mask=x_ok & (cols >= 2), other=0.0), USE_ASM)
    inv0a, dx0a, inv0b, dx0b = _half_scales(x0, KL)
    inv1a, dx1a, inv1b, dx1b = _half_scales(x1, KL)
    # shifted column c is x0[c - 2]: the first half's below 18
    a_s, b_s = _int16_pairs(shifted, tl.where(cols < 18, inv0a, inv0b), KL, USE_ASM)
    _, b_0 = _int16_pairs(x0, tl.where(cols < 16, inv0a, inv0b), KL, USE_ASM)
    a_1, b_1 = _int16_pairs(x1, tl.where(cols < 16, inv1a, inv1b), KL, USE_ASM)
    shape: tl.constexpr = (BLOCK_N, KL, 8)
    head = tl.reshape(tl.load(words + tl.arange(0, 8)[None, :]), shape)  # words 0-7
    last = tl.reshape(tl.load(words + 8), (BLOCK_N, KL))  # word 8: quants 30-31 of block 0, d1
    body = tl.reshape(tl.load(words + 9 + tl.arange(0, 8)[None, :]), shape)  # words 9-16
    zero = tl.zeros(shape, dtype=tl.int32)
    lo = _dp2a_pair_signed(zero, _lanes(a_s, KL), 0 * _lanes(b_s, KL), head, USE_ASM)  # bytes 0-1
    hi = _dp2a_pair_signed(zero, 0 * _lanes(a_s, KL), _lanes(b_s, KL), head, USE_ASM)  # bytes 2-3
    i0a, i0b = _half_sums(lo + hi, BLOCK_N, KL)  # columns 0-3 | 4-7
    straddle = _column(lo, 4)  # word 4's bytes 0-1: the first half's, not the second's
    i0a += straddle
    i0b += _dp2a_pair_signed(
        tl.zeros((BLOCK_N, KL), dtype=tl.int32), _column(_lanes(b_0, KL), 7), 0 * last, last, USE_ASM
    )
    i0b -= straddle
    i1a, i1b = _half_sums(
        _dp2a_pair_signed(zero, _lanes(a_1, KL), _lanes(b_1, KL), body, USE_ASM), BLOCK_N, KL
    )
    d0 = _f16_bits(_column(head, 0) & 0xFFFF)  # [BLOCK_N, KL]
    d1 = _f16_bits((last >> 16) & 0xFFFF)
    lane: tl.constexpr = (1, KL)
    part0 = tl.reshape(dx0a, lane) * i0a.to(tl.float32) + tl.reshape(dx0b, lane) * i0b.to(tl.float32)
    part1 = tl.reshape(dx1a, lane) * i1a.to(tl.float32) + tl.reshape(dx1b, lane) * i1b.to(tl.float32)
    return d0 * part0 + d1 * part1


@triton.jit
def _half_scales(x, KL: tl.constexpr):
    """(2**-e, 2**e) of each half of 16 of x [KL, 32]: four [KL, 1] tiles, the first half's first."""
    amax_a, amax_b = tl.split(tl.max(tl.abs(tl.reshape(x, (KL, 2, 16))), axis=2))
    inv_a, dx_a = _power_of_two_scale(tl.reshape(amax_a, (KL, 1)))
    inv_b, dx_b = _power_of_two_scale(tl.reshape(amax_b, (KL, 1)))
    return inv_a, dx_a, inv_b, dx_b


@triton.jit
def _half_sums(per_word, BLOCK_N: tl.constexpr, KL: tl.constexpr):
    """The sums of columns 0-3 and 4-7 of per_word [BLOCK_N, KL, 8]."""
    return tl.split(tl.sum(tl.reshape(per_word, (BLOCK_N, KL, 2, 4)), axis=3))


@triton.jit
def _column(t, C: tl.constexpr):
    """Column C of t [A, B, 8] -> [A, B]: a register pick, three splits of the last dimension
    (column 4 i + 2 j + k: k's split, then j's, then i's)."""
    k0, k1 = tl.split(tl.reshape(t, (t.shape[0], t.shape[1], 2, 2, 2)))
    j0, j1 = tl.split(k1 if C % 2 else k0)
    i0, i1 = tl.split(j1 if (C // 2) % 2 else j0)
    return i1 if C // 4 else i0


@triton.jit
def _lanes(pairs, KL: tl.constexpr):
    """x pairs [KL, 8] as [1, KL, 8], to meet every row's words."""
    return tl.reshape(pairs, (1, KL, 8))


@triton.jit
def _dp2a_pair_signed(acc, a, b, w, USE_ASM: tl.constexpr):
    """`_dp2a_pair` with the bytes of w signed (Q8_0's int8 quants)."""
    if USE_ASM:
        return tl.inline_asm_elementwise(
            asm="""{
            dp2a.lo.s32.s32 $0, $2, $4, $1;
            dp2a.hi.s32.s32 $0, $3, $4, $0;
            }""",
            constraints="=r,r,r,r,r",
            args=[acc, a, b, w],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        s = ((a << 16) >> 16) * ((w << 24) >> 24) + (a >> 16) * ((w << 16) >> 24)
        return acc + s + ((b << 16) >> 16) * ((w << 8) >> 24) + (b >> 16) * (w >> 24)


@triton.jit
def _load_half_x(x_ptrs, x_ok, USE_ASM: tl.constexpr):
    """A lane's 16 x values as 2 fp32 tiles [KL, 8] and, per lane ([KL, 1]), 2**-e, 2**e
    (`_power_of_two_scale`) and the exact sum of the 16."""
    x0 = _to_f32(tl.load(x_ptrs, mask=x_ok, other=0.0), USE_ASM)
    x1 = _to_f32(tl.load(x_ptrs + 8, mask=x_ok, other=0.0), USE_ASM)
    amax = tl.maximum(tl.abs(x0), tl.abs(x1))
    inv, scale = _power_of_two_scale(tl.max(amax, axis=1, keep_dims=True))
    return x0, x1, inv, scale, tl.sum(x0 + x1, axis=1, keep_dims=True)


@triton.jit
def _power_of_two_scale(amax):
    """(2**-e, 2**e) with amax * 2**-e in [2**13, 2**14), from amax's exponent bits (biased b:
    e = b - 127 - 13); b is floored at 14 so tiny and zero blocks get finite scales."""
    b = tl.maximum((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF, 14)
    inv = ((267 - b) << 23).to(tl.float32, bitcast=True)
    return inv, ((b - 13) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _dp2a_step(
    i_lo,
    i_hi,
    q_words,
    qh_words,
    qh_shift,
    x_lo,
    x_hi,
    inv_lo,
    inv_hi,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
    Q5: tl.constexpr,
):
    """2 quant words of each lane's group ([BLOCK_N * KL, 2] pointers) against the 8 + 8 x values
    they meet (x_lo, x_hi [KL, 8] fp32; byte b of word c meets element 4 c + b): the int32 sums
    i_lo [BLOCK_N, KL, 2] += low quants * xq_lo, i_hi += high quants * xq_hi, per word (Q4_K: the
    high nibbles in place, 16 q; Q5_K: each quant's fifth bit, bit qh_shift / qh_shift + 1 of its
    qh byte, joined as 16 in its byte, so q <= 31). A masked word's bytes 0-1 meet one int16 pair
    of x (dp2a.lo), bytes 2-3 the next (.hi)."""
    lo, hi = _quant_planes(q_words, qh_words, qh_shift, BLOCK_N, KL, Q5)
    a_lo, b_lo = _int16_pairs(x_lo, inv_lo, KL, USE_ASM)  # pairs (4 c, 4 c + 1), (4 c + 2, 4 c + 3)
    a_hi, b_hi = _int16_pairs(x_hi, inv_hi, KL, USE_ASM)
    return _dp2a_planes(i_lo, i_hi, lo, hi, a_lo, b_lo, a_hi, b_hi, BLOCK_N, KL, USE_ASM)


@triton.jit
def _quant_planes(q_words, qh_words, qh_shift, BLOCK_N: tl.constexpr, KL: tl.constexpr, Q5: tl.constexpr):
    """2 quant words of each lane's group ([BLOCK_N * KL, 2] pointers) as its low and high quants'
    bytes [BLOCK_N, KL, 2] (see `_dp2a_step`)."""
    shape: tl.constexpr = (BLOCK_N, KL, 2)
    qw = tl.reshape(tl.load(q_words), shape)
    if Q5:
        # bit 0 / 1 of each byte: the low / high quant's fifth bit
        qh = tl.reshape(tl.load(qh_words) >> qh_shift, shape)
        lo = (qw & 0x0F0F0F0F) | ((qh & 0x01010101) << 4)
        hi = ((qw >> 4) & 0x0F0F0F0F) | ((qh & 0x02020202) << 3)
    else:
        lo = qw & 0x0F0F0F0F
        hi = qw & -0x0F0F0F10  # 0xF0F0F0F0: the high nibbles in place
    return lo, hi


@triton.jit
def _dp2a_planes(
    i_lo, i_hi, lo, hi, a_lo, b_lo, a_hi, b_hi, BLOCK_N: tl.constexpr, KL: tl.constexpr, USE_ASM: tl.constexpr
):
    """i_lo, i_hi [BLOCK_N, KL, 2] plus the quant planes lo, hi against the lanes' int16 pairs of x
    ([KL, 2] each: `_int16_pairs`), by dp2a."""
    shape: tl.constexpr = (BLOCK_N, KL, 2)
    a_lo = tl.broadcast_to(tl.reshape(a_lo, (1, KL, 2)), shape)
    b_lo = tl.broadcast_to(tl.reshape(b_lo, (1, KL, 2)), shape)
    a_hi = tl.broadcast_to(tl.reshape(a_hi, (1, KL, 2)), shape)
    b_hi = tl.broadcast_to(tl.reshape(b_hi, (1, KL, 2)), shape)
    return _dp2a_pair(i_lo, a_lo, b_lo, lo, USE_ASM), _dp2a_pair(i_hi, a_hi, b_hi, hi, USE_ASM)


@triton.jit
def _int16_pairs(x, inv, KL: tl.constexpr, USE_ASM: tl.constexpr):
    """x [KL, 4 C] fp32 times inv [KL, 1] (|x * inv| < 2**14) rounded to the nearest integer (ties
    to even; one fma, exact as x * inv is), two to a word: ([KL, C] pairs of elements (4 c, 4 c + 1),
    [KL, C] pairs (4 c + 2, 4 c + 3)), the first of a pair in bits 0-15."""
    r = tl.fma(x, inv, _ROUND_MAGIC).to(tl.int32, bitcast=True)
    even, odd = tl.split(tl.reshape(r, (KL, x.shape[1] // 4, 2, 2)))  # elements 4 c + 2 u / 4 c + 2 u + 1
    b0, b2 = tl.split(even)
    b1, b3 = tl.split(odd)
    return _pack16(b0, b1, USE_ASM), _pack16(b2, b3, USE_ASM)


@triton.jit
def _pack16(lo, hi, USE_ASM: tl.constexpr):
    """The low halves of lo and hi in one word (lo's in bits 0-15): one PRMT on the GPU."""
    if USE_ASM:
        return tl.inline_asm_elementwise(
            asm="prmt.b32 $0, $1, $2, 0x5410;",
            constraints="=r,r,r",
            args=[lo, hi],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        return (lo & 0xFFFF) | (hi << 16)


@triton.jit
def q6k_int16x_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    NB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr = False,
    SPLIT: tl.constexpr = False,  # the rows in the split layout (gguf_dequant.block_at)
    sums_ptr=None,  # fusion (one token): fp8_gemv.GemvFusion's sums / residual / handoff
    num_sums=1,
    eps=0.0,
    hand_w_ptr=None,
    scaled_ptr=None,
    part_ptr=None,
    SUMS: tl.constexpr = False,
    SUMS_PAD: tl.constexpr = 1,
    RESIDUAL: tl.constexpr = False,
    HANDOFF: tl.constexpr = False,
):
    # Q6_K, one token, in gguf_gemv_lane.q6k_gemv_kernel's lanes (_q6k_weight_lanes: a lane's 4
    # columns of a half-block, 4 quarters Q), 16 lanes a block and NB blocks of each row a loop
    # step side by side, so one step's loads are all issued before their sums need them. x is
    # rounded per lane and quarter, 4 values at a time (a Q6_K scale spans 16 columns over 4
    # lanes; 4 keeps the rounding in the lane), so
    #     sum_c sc * (q_c - 32) * x_c  ~=  sc * (2**e * sum_c q_c * xq_c  -  32 * sum_c x_c)
    # with q_c the unsigned 6-bit quants of one word: two dp2a, no per-weight float work.
    q6k_int16x_program(
        tl.program_id(0),
        x_ptr,
        w_ptr,
        bias_ptr,
        out_ptr,
        rows,
        num_blocks,
        stride_w,
        NB,
        BLOCK_N,
        HAS_LINEAR_BIAS,
        USE_ASM,
        PDL,
        SPLIT,
        sums_ptr,
        num_sums,
        eps,
        hand_w_ptr,
        scaled_ptr,
        part_ptr,
        SUMS,
        SUMS_PAD,
        RESIDUAL,
        HANDOFF,
    )


@triton.jit
def q6k_int16x_program(
    pid,
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    NB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr,
    SPLIT: tl.constexpr,
    sums_ptr=None,  # fusion (one token): fp8_gemv.GemvFusion's sums / residual / handoff
    num_sums=1,
    eps=0.0,
    hand_w_ptr=None,
    scaled_ptr=None,
    part_ptr=None,
    SUMS: tl.constexpr = False,
    SUMS_PAD: tl.constexpr = 1,
    RESIDUAL: tl.constexpr = False,
    HANDOFF: tl.constexpr = False,
):
    """q6k_int16x_kernel's program `pid`: rows [pid * BLOCK_N, +BLOCK_N) of one token."""
    KL: tl.constexpr = 16 * NB
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    row_off, sb_w, ql_off, qh_off, sc_off = _q6k_weight_lanes(pid, rows, stride_w, BLOCK_N, KL)
    x_off, sb_x, _ = _q6k_token_lanes(0, 1, 1, KL)
    sums = load_handed_sums(sums_ptr, num_sums, SUMS_PAD) if SUMS else 0.0  # after the PDL wait
    acc = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    for k in range(0, num_blocks, NB):
        # Blocks past the end read block 0 of the row and meet x = 0.
        sb = tl.where((k + sb_w) < num_blocks, k + sb_w, 0)
        blk, sblk = block_at(w_ptr + row_off, sb, num_blocks, 210, SPLIT)
        x_ok = (k + sb_x) < num_blocks
        acc += _q6k_int16x_block(
            blk, sblk, ql_off, qh_off, sc_off, x_ptr + k * 256 + x_off, x_ok, BLOCK_N, KL, USE_ASM, SPLIT
        )
    _store_lane_acc(
        out_ptr,
        bias_ptr,
        acc,
        pid,
        rows,
        BLOCK_N,
        HAS_LINEAR_BIAS,
        RESIDUAL,
        HANDOFF,
        hand_w_ptr,
        scaled_ptr,
        part_ptr,
        handed_rstd(sums, num_blocks * 256, eps) if SUMS else 1.0,
    )


@triton.jit
def _q6k_int16x_block(
    blk,
    sblk,
    ql_off,
    qh_off,
    sc_off,
    x_ptrs,
    x_ok,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """One lane item of a Q6_K block (`blk`, `sblk` [BLOCK_N * KL, 1] byte pointers at the rows'
    blocks: gguf_dequant.block_at) against its 16 x values (`x_ptrs` [KL, 4] at quarter
    0) -> [BLOCK_N, KL]."""
    ql_a = load_q6k_word(blk + ql_off, SPLIT, USE_ASM)
    ql_b = load_q6k_word(blk + ql_off + 32, SPLIT, USE_ASM)
    qh = load_q6k_word(blk + qh_off, SPLIT, USE_ASM)
    d = tl.load((sblk + 208).to(tl.pointer_type(tl.uint16))).to(tl.float16, bitcast=True).to(tl.float32)
    part = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    for Q in tl.static_range(4):
        u = tl.reshape(q6k_quant_bytes(ql_a, ql_b, qh, Q), (BLOCK_N, KL))  # 4 quants q in [0, 63]
        sc = tl.reshape(
            d * tl.load((sblk + sc_off + 2 * Q).to(tl.pointer_type(tl.int8))).to(tl.float32), (BLOCK_N, KL)
        )
        x = _to_f32(tl.load(x_ptrs + 32 * Q, mask=x_ok, other=0.0), USE_ASM)  # [KL, 4]
        inv, scale = _power_of_two_scale(tl.max(tl.abs(x), axis=1, keep_dims=True))
        a, b = _int16_pairs(x, inv, KL, USE_ASM)  # [KL, 1] each
        a = tl.broadcast_to(tl.reshape(a, (1, KL)), (BLOCK_N, KL))
        b = tl.broadcast_to(tl.reshape(b, (1, KL)), (BLOCK_N, KL))
        q_sums = _dp2a_pair(tl.zeros((BLOCK_N, KL), dtype=tl.int32), a, b, u, USE_ASM).to(tl.float32)
        x_sums = tl.reshape(tl.sum(x, axis=1), (1, KL))
        part += sc * (tl.reshape(scale, (1, KL)) * q_sums - 32.0 * x_sums)
    return part


@triton.jit
def _dp2a_pair(acc, a, b, w, USE_ASM: tl.constexpr):
    """acc + dp2a.lo(a, w) + dp2a.hi(b, w): signed 16-bit pairs a, b times the unsigned bytes of w
    (bytes 0-1 meet a's halves, bytes 2-3 b's)."""
    if USE_ASM:
        return tl.inline_asm_elementwise(
            asm="""{
            dp2a.lo.s32.u32 $0, $2, $4, $1;
            dp2a.hi.s32.u32 $0, $3, $4, $0;
            }""",
            constraints="=r,r,r,r,r",
            args=[acc, a, b, w],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        s = ((a << 16) >> 16) * (w & 0xFF) + (a >> 16) * ((w >> 8) & 0xFF)
        return acc + s + ((b << 16) >> 16) * ((w >> 16) & 0xFF) + (b >> 16) * ((w >> 24) & 0xFF)


def q6k_int16x_ref(x: torch.Tensor, weight_data: torch.Tensor, in_features: int) -> torch.Tensor:
    """What q6k_int16x_kernel computes, in torch: x [1, K] rounded per 4 values (`int16_x_blocks`
    with 4 for 32), each 16-weight group's sc * (2**e * sum q * xq - 32 * sum x) -> [1, rows] fp32."""
    xq, dx = int16_x_blocks(x[0], group=4)  # [K / 4, 4], [K / 4]
    scale, q = q6k_fields(weight_data, in_features)  # [rows, K / 16], [rows, K / 16, 16] unsigned
    rows = q.shape[0]
    int_sums = (q.double().reshape(rows, -1, 4) * xq.double()[None]).sum(dim=2).float()  # [rows, K / 4]
    x_sums = x[0].float().reshape(-1, 4).sum(dim=1)
    per4 = dx[None] * int_sums - 32.0 * x_sums[None]
    return (scale.repeat_interleave(4, dim=1) * per4).sum(dim=1)[None]


def q41_int16x_ref(x: torch.Tensor, weight_data: torch.Tensor, in_features: int) -> torch.Tensor:
    """What q41_int16x_kernel computes, in torch: x [1, K] rounded by `int16_x_blocks` per 16 values
    (a block's low-nibble half, then its high one), the Q4_1 rows' (d, m, q), exact integer sums
    -> [1, rows] fp32."""
    xq, dx = int16_x_blocks(x[0])  # [K / 16, 16], [K / 16]
    d, m, q = q41_fields(weight_data, in_features)  # [rows, K / 32] x2, [rows, K / 32, 32]
    rows = q.shape[0]
    int_sums = (q.double().reshape(rows, -1, 16) * xq.double()[None]).sum(dim=2).float()  # [rows, K / 16]
    x_sums = x[0].float().reshape(-1, 32).sum(dim=1)
    scaled = d.repeat_interleave(2, dim=1) * dx[None] * int_sums
    return (scaled.sum(dim=1) + (m * x_sums[None]).sum(dim=1))[None]


def q80_int16x_ref(x: torch.Tensor, weight_data: torch.Tensor, in_features: int) -> torch.Tensor:
    """What q80_int16x_kernel computes, in torch: x [1, K] rounded by `int16_x_blocks` per 16
    values, the Q8_0 rows' (d, q), exact integer sums -> [1, rows] fp32."""
    xq, dx = int16_x_blocks(x[0])  # [K / 16, 16], [K / 16]
    d, q = q80_fields(weight_data, in_features)  # [rows, K / 32], [rows, K / 32, 32]
    rows = q.shape[0]
    int_sums = (q.double().reshape(rows, -1, 16) * xq.double()[None]).sum(dim=2).float()  # [rows, K / 16]
    return (d.repeat_interleave(2, dim=1) * dx[None] * int_sums).sum(dim=1)[None]


def int16_x_blocks(
    x: torch.Tensor, bits: int = X_BITS, group: int = Q4K_X_GROUP
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] as the kernels round it, per `group` values (Q4_K 16, Q6_K 4): (xq [..., K / group,
    group] float32 integers, |xq| <= 2**bits, and 2**e [..., K / group]) with x ~= 2**e * xq
    (`_power_of_two_scale`; other `bits` show what a narrower integer would do)."""
    xf = x.float().reshape(*x.shape[:-1], -1, group)
    biased = (xf.abs().amax(dim=-1).view(torch.int32) >> 23) & 0xFF
    e = biased.clamp(min=14) - 127 - (bits - 1)
    scale = torch.pow(2.0, e.float())
    return torch.round(xf / scale[..., None]), scale  # exact division by a power of two; half to even


def q4k_int16x_ref(
    x: torch.Tensor, weight_data: torch.Tensor, in_features: int, qtype: str = "Q4_K"
) -> torch.Tensor:
    """What q4k_int16x_kernel computes, in torch: x [1, K] rounded by `int16_x_blocks` per
    Q4K_X_GROUP values, the Q4_K (or Q5_K) rows' (d * sc, dmin * m, q) from gguf's layout, exact
    integer sums -> [1, rows] fp32."""
    group = Q4K_X_GROUP
    xq, dx = int16_x_blocks(x[0])  # [K / group, group], [K / group]
    scale, minimum, q = q4k_fields(weight_data, in_features, qtype)  # [rows, K / 32] x2, [rows, K / 32, 32]
    rows = q.shape[0]
    int_sums = (q.double().reshape(rows, -1, group) * xq.double()[None]).sum(dim=2).float()  # exact
    x_sums = x[0].float().reshape(-1, 32).sum(dim=1)
    scaled = (scale.repeat_interleave(32 // group, dim=1) * dx[None]) * int_sums
    return (scaled.sum(dim=1) - (minimum * x_sums[None]).sum(dim=1))[None]
