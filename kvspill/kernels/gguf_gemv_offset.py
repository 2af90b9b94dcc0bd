"""The one-token Q4_K GEMV for bf16 / fp16 x that sums offset quants (kernels/gguf_gemv.py
dispatches to it; `Q4K_ONE_TOKEN_CONFIG`).

The lanes of gguf_gemv_lane.q4k_gemv_kernel (one warp a program; one 32-byte group of a super-block
a lane, for all BLOCK_N rows), but no nibble becomes q: it becomes 2**E + q with one LOP3 and no
subtract, and 2**E * sc joins the min term. The lane kernels are issue-bound, so the quarter of
the loop's instructions this drops is 12% less time on an H200
(bench/results/2026-12-03-h200-gemv-one-token). Under Triton's interpreter the PTX helper has a
plain-Triton twin.

Invariant: the result is x @ dequantize(W).T with fp32 rounding of ~2**-13 of sum |x| (within 1e-4
of the largest output), not 2**-24: fp32 x takes the exact lane kernel instead.
"""

from __future__ import annotations

from kvspill.kernels.gguf_gemv_lane import _q4k_decode, _split4, _store_lane_sums, _to_f32
from kvspill.kernels.pdl import LANE_PREFETCH_LINES, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton


@triton.jit
def q4k_one_token_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    HAS_LINEAR_BIAS: tl.constexpr,
    SB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    X_ASM: tl.constexpr,
    PDL: tl.constexpr = False,
):
    # Q4_K, one token. Grid: (cdiv(rows, BLOCK_N),). Low nibbles become 128 + q, high ones 2048 + q
    # (_word_nibbles), so per sub-block
    #     sum_l (sc * q_l - m) * x_l = sc * sum_l (2**E + q_l) * x_l - (m + 2**E * sc) * sum_l x_l.
    KL: tl.constexpr = 4 * SB
    pid = tl.program_id(0)
    row, sb_w, g, _, i_x, x_off = q4k_one_token_lanes(w_ptr, pid, rows, stride_w, BLOCK_N, KL, PDL)
    acc = tl.zeros((BLOCK_N, KL, 1), dtype=tl.float32)
    for k in range(0, num_blocks, SB):
        words = (row + tl.where((k + sb_w) < num_blocks, (k + sb_w) * 144, 0)).to(tl.pointer_type(tl.int32))
        acc += _q4k_offset_super_blocks(
            words, g, x_ptr + k * 256 + x_off, (k + i_x // 4) < num_blocks, BLOCK_N, KL, USE_ASM, X_ASM
        )
    out = tl.reshape(tl.sum(tl.sum(acc, axis=2), axis=1), (1, BLOCK_N))
    _store_lane_sums(out_ptr, bias_ptr, out, pid, rows, 0, 1, 1, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def q4k_one_token_lanes(
    w_ptr,
    pid,
    rows,
    stride_w,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    PDL: tl.constexpr,
    PARTS: tl.constexpr = 1,
):
    """The one-token Q4_K lanes (this kernel's, PARTS 1, and gguf_gemv_int16x's, PARTS 2): a 32-byte
    group of a super-block split in PARTS lanes. Prefetch the program's rows, then per element
    r * KL + kl of [BLOCK_N * KL, 1] its row pointer, super-block of the K step, group g and part
    (kl = PARTS * (4 * super-block + g) + part), and per lane [KL, 1] its x offsets [KL, 8] (the
    first 8 of the part's 64 / PARTS x values, low nibbles' half; the high ones' are 32 on).
    Returns (row, sb_w, g, part, i_x, x_off)."""
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]  # r * KL + kl
    n = pid * BLOCK_N + i_w // KL
    # Rows past the end read row 0 (their sums are not stored), super-blocks past the end block 0
    # (they meet x = 0), so the weight loads need no mask (masked ones cost 5% of a step:
    # bench/results/2026-12-04-h200-q6k-few-rows).
    row = w_ptr + tl.where(n < rows, n, 0).to(tl.int64) * stride_w
    kl = i_w % KL
    i_x = tl.arange(0, KL)[:, None]
    part_x = (i_x % PARTS) * (32 // PARTS)
    x_off = (i_x // (4 * PARTS)) * 256 + ((i_x // PARTS) % 4) * 64 + part_x + tl.arange(0, 8)[None, :]
    return row, kl // (4 * PARTS), (kl // PARTS) % 4, kl % PARTS, i_x, x_off


@triton.jit
def _q4k_offset_super_blocks(
    words,
    g,
    x_ptrs,
    x_ok,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
    X_ASM: tl.constexpr,
):
    """One step of the K loop: each lane's 32-byte group g of its super-block (`words` at the
    block, [BLOCK_N * KL, 1] int32 pointers) against its 64 x values (`x_ptrs` [KL, 8] at the
    group's first 8) -> the lane's [BLOCK_N, KL, 1] share of the output."""
    h0, h1, h2, h3 = _split4(tl.load(words + tl.arange(0, 4)[None, :]))
    sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, 16 * (g % 2), g < 2)
    s7 = tl.zeros((BLOCK_N, KL, 2), dtype=tl.float32)
    s11 = tl.zeros((BLOCK_N, KL, 2), dtype=tl.float32)
    x_lo = tl.zeros((1, KL, 8), dtype=tl.float32)
    x_hi = tl.zeros((1, KL, 8), dtype=tl.float32)
    for p in tl.static_range(4):
        q_words = words + 4 + g * 8 + 2 * p
        s7, s11, x_lo, x_hi = _q4k_offset_sums(
            s7, s11, x_lo, x_hi, q_words, x_ptrs + 8 * p, x_ok, BLOCK_N, KL, USE_ASM, X_ASM
        )
    shape: tl.constexpr = (BLOCK_N, KL, 1)
    sc_lo = tl.reshape(sc_lo, shape)
    sc_hi = tl.reshape(sc_hi, shape)
    part = sc_lo * tl.sum(s7, axis=2, keep_dims=True) + sc_hi * tl.sum(s11, axis=2, keep_dims=True)
    part -= (tl.reshape(mn_lo, shape) + 128.0 * sc_lo) * tl.sum(x_lo, axis=2, keep_dims=True)
    part -= (tl.reshape(mn_hi, shape) + 2048.0 * sc_hi) * tl.sum(x_hi, axis=2, keep_dims=True)
    return part


@triton.jit
def _q4k_offset_sums(
    s7,
    s11,
    x_lo,
    x_hi,
    q_words,
    x_ptrs,
    x_ok,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
    X_ASM: tl.constexpr,
):
    """8 quant bytes of the lane's group (2 words, [BLOCK_N * KL, 2]) and the 8 + 8 x values they
    multiply: s7 [BLOCK_N, KL, 2] += (128 + low nibble) * x (byte b of word c meets x[4 c + b]),
    s11 += (2048 + high nibble) * x[32 + 4 c + b]; x_lo, x_hi [1, KL, 8] += the x values."""
    qw = tl.load(q_words + tl.arange(0, 2)[None, :])
    xl = _to_f32(tl.load(x_ptrs, mask=x_ok, other=0.0), X_ASM)  # [KL, 8]
    xh = _to_f32(tl.load(x_ptrs + 32, mask=x_ok, other=0.0), X_ASM)
    lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3 = _word_nibbles(qw, USE_ASM)
    xl0, xl1, xl2, xl3 = _split_bytes(xl, KL)
    xh0, xh1, xh2, xh3 = _split_bytes(xh, KL)
    w_shape: tl.constexpr = (BLOCK_N, KL, 2)
    x_shape: tl.constexpr = (1, KL, 2)
    s7 += tl.reshape(lo0, w_shape) * tl.reshape(xl0, x_shape)
    s7 += tl.reshape(lo1, w_shape) * tl.reshape(xl1, x_shape)
    s7 += tl.reshape(lo2, w_shape) * tl.reshape(xl2, x_shape)
    s7 += tl.reshape(lo3, w_shape) * tl.reshape(xl3, x_shape)
    s11 += tl.reshape(hi0, w_shape) * tl.reshape(xh0, x_shape)
    s11 += tl.reshape(hi1, w_shape) * tl.reshape(xh1, x_shape)
    s11 += tl.reshape(hi2, w_shape) * tl.reshape(xh2, x_shape)
    s11 += tl.reshape(hi3, w_shape) * tl.reshape(xh3, x_shape)
    return s7, s11, x_lo + tl.reshape(xl, (1, KL, 8)), x_hi + tl.reshape(xh, (1, KL, 8))


@triton.jit
def _split_bytes(v, M: tl.constexpr):
    """[M, 8] (element 4 c + b, c < 2) -> the 4 tensors [M, 2] of b = 0, 1, 2, 3 (register moves
    when, as loaded, a thread holds all 8)."""
    even, odd = tl.split(tl.reshape(v, (M, 2, 2, 2)))  # (c, b // 2) of b = 0, 2, 4, 6 / 1, 3, 5, 7
    b0, b2 = tl.split(even)
    b1, b3 = tl.split(odd)
    return b0, b1, b2, b3


@triton.jit
def _offset_nibble(v, mask: tl.constexpr, exponent: tl.constexpr):
    return ((v & mask) | exponent).to(tl.float32, bitcast=True)


@triton.jit
def _word_nibbles(qw, USE_ASM: tl.constexpr):
    """int32 words -> 8 float32 tensors of their shape: 128 + the low nibble of byte b (b = 0..3;
    the nibble at bits 16..19 of a shifted word under the exponent of 128), then 2048 + the high
    nibble of byte b (at bits 12..15, under 2048's). On the GPU 3 shifts (one a rotate) and 8
    LOP3s a word; elementwise, so any register layout works."""
    if USE_ASM:
        lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3 = tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 l8, r8, rot;
            shf.l.wrap.b32 rot, $8, $8, 16;
            shl.b32 l8, $8, 8;
            shr.b32 r8, $8, 8;
            lop3.b32 $0, rot, 0x000F0000, 0x43000000, 0xEA;
            lop3.b32 $1, l8, 0x000F0000, 0x43000000, 0xEA;
            lop3.b32 $2, $8, 0x000F0000, 0x43000000, 0xEA;
            lop3.b32 $3, r8, 0x000F0000, 0x43000000, 0xEA;
            lop3.b32 $4, l8, 0x0000F000, 0x45000000, 0xEA;
            lop3.b32 $5, $8, 0x0000F000, 0x45000000, 0xEA;
            lop3.b32 $6, r8, 0x0000F000, 0x45000000, 0xEA;
            lop3.b32 $7, rot, 0x0000F000, 0x45000000, 0xEA;
            }""",
            constraints="=r,=r,=r,=r,=r,=r,=r,=r,r",
            args=[qw],
            dtype=(tl.int32, tl.int32, tl.int32, tl.int32, tl.int32, tl.int32, tl.int32, tl.int32),
            is_pure=True,
            pack=1,
        )
        return (
            lo0.to(tl.float32, bitcast=True),
            lo1.to(tl.float32, bitcast=True),
            lo2.to(tl.float32, bitcast=True),
            lo3.to(tl.float32, bitcast=True),
            hi0.to(tl.float32, bitcast=True),
            hi1.to(tl.float32, bitcast=True),
            hi2.to(tl.float32, bitcast=True),
            hi3.to(tl.float32, bitcast=True),
        )
    else:
        l8 = qw << 8
        r8 = qw >> 8
        return (
            _offset_nibble(qw << 16, 0x000F0000, 0x43000000),
            _offset_nibble(l8, 0x000F0000, 0x43000000),
            _offset_nibble(qw, 0x000F0000, 0x43000000),
            _offset_nibble(r8, 0x000F0000, 0x43000000),
            _offset_nibble(l8, 0x0000F000, 0x45000000),
            _offset_nibble(qw, 0x0000F000, 0x45000000),
            _offset_nibble(r8, 0x0000F000, 0x45000000),
            _offset_nibble(qw >> 16, 0x0000F000, 0x45000000),
        )
