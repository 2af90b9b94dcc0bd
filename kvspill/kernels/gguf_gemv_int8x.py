"""The one-token Q4_K GEMV on int8 x (dp4a): llama.cpp's MMVQ arithmetic in gguf_gemv's lanes
(kernels/gguf_gemv.py dispatches to it when `INT8_X` is on).

Each lane quantizes the 64 x values of its 32-byte group in registers, per 32 (one Q4_K
sub-block each): xq = round(x * 127 / amax), dx = amax / 127 (llama.cpp's Q8_1 blocks), for all
BLOCK_N rows it holds. A weight word then takes two ANDs (low nibbles; high ones left in place, 16 q) and two
dp4a for its 8 weights, 0.5 instructions a weight against 3-4 for the float
lanes (gguf_gemv_offset), which are issue-bound at half the card's bandwidth. Per sub-block

    sum_l (sc * q_l - m) * x_l  ~=  sc * dx * sum_l q_l * xq_l  -  m * sum_l x_l,

the min term on the exact sum of x. Under Triton's interpreter the PTX has a plain-Triton twin.

Invariant: the result equals `q4k_int8x_ref` (the same x quantization, fp32 sums) to fp32
rounding; against the exact x @ dequantize(W).T it differs by x's int8 rounding (|x - dx * xq|
<= dx / 2 an element), the approximation `INT8_X` switches (quality: docs/performance.md).
"""

from __future__ import annotations

import torch

from kvspill.kernels.gguf_formats import q4k_fields
from kvspill.kernels.gguf_gemv_lane import _q4k_decode, _split4, _store_lane_sums, _to_f32
from kvspill.kernels.pdl import LANE_PREFETCH_LINES, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton

# 1.5 * 2**23: x + MAGIC rounds x (|x| < 2**22) to an integer held in the float's low mantissa
# bits, two's complement, so the low byte is the int8 with no float-to-int convert.
_ROUND_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def q4k_int8x_kernel(
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
    PDL: tl.constexpr = False,
):
    # Q4_K, one token. Grid: (cdiv(rows, BLOCK_N),). Lane kl = 4 * (super-block) + g of the K
    # step owns group g's 32 bytes of each of the program's rows and the 64 x values they meet.
    KL: tl.constexpr = 4 * SB
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]  # r * KL + kl
    n = pid * BLOCK_N + i_w // KL
    # Rows past the end read row 0 (their sums are not stored), super-blocks past the end block 0
    # (they meet x = 0), so the weight loads need no mask.
    row = w_ptr + tl.where(n < rows, n, 0).to(tl.int64) * stride_w
    sb_w = (i_w % KL) // 4
    g = i_w % 4
    i_x = tl.arange(0, KL)[:, None]
    x_off = (i_x // 4) * 256 + (i_x % 4) * 64 + tl.arange(0, 8)[None, :]  # [KL, 8]
    acc = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    for k in range(0, num_blocks, SB):
        words = (row + tl.where((k + sb_w) < num_blocks, (k + sb_w) * 144, 0)).to(tl.pointer_type(tl.int32))
        x_ok = (k + i_x // 4) < num_blocks
        acc += _q4k_int8x_group(words, g, x_ptr + k * 256 + x_off, x_ok, BLOCK_N, KL, USE_ASM)
    out = tl.reshape(tl.sum(acc, axis=1), (1, BLOCK_N))
    _store_lane_sums(out_ptr, bias_ptr, out, pid, rows, 0, 1, 1, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def _q4k_int8x_group(words, g, x_ptrs, x_ok, BLOCK_N: tl.constexpr, KL: tl.constexpr, USE_ASM: tl.constexpr):
    """One K step: each lane's group g (`words` at its super-block, [BLOCK_N * KL, 1] int32
    pointers) against its 64 x values (`x_ptrs` [KL, 8] at the group's first 8) -> the lane's
    [BLOCK_N, KL] share of the output."""
    h0, h1, h2, h3 = _split4(tl.load(words + tl.arange(0, 4)[None, :]))
    sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, 16 * (g % 2), g < 2)
    xl0, xl1, xl2, xl3, inv_lo, dx_lo, sum_lo = _load_sub_block_x(x_ptrs, x_ok, USE_ASM)
    xh0, xh1, xh2, xh3, inv_hi, dx_hi, sum_hi = _load_sub_block_x(x_ptrs + 32, x_ok, USE_ASM)
    q_words = words + 4 + g * 8 + tl.arange(0, 2)[None, :]  # words 2 p, 2 p + 1 of the group
    i_lo = tl.zeros((BLOCK_N, KL, 2), dtype=tl.int32)
    i_hi = tl.zeros((BLOCK_N, KL, 2), dtype=tl.int32)
    i_lo, i_hi = _dp4a_step(i_lo, i_hi, q_words, xl0, xh0, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM)
    i_lo, i_hi = _dp4a_step(i_lo, i_hi, q_words + 2, xl1, xh1, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM)
    i_lo, i_hi = _dp4a_step(i_lo, i_hi, q_words + 4, xl2, xh2, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM)
    i_lo, i_hi = _dp4a_step(i_lo, i_hi, q_words + 6, xl3, xh3, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM)
    shape: tl.constexpr = (BLOCK_N, KL)
    lane: tl.constexpr = (1, KL)
    # i_hi holds 16 * q of the high nibbles (masked in place, not shifted down).
    part = tl.reshape(sc_lo, shape) * tl.reshape(dx_lo, lane) * tl.sum(i_lo, axis=2).to(tl.float32)
    part += tl.reshape(sc_hi, shape) * tl.reshape(dx_hi * 0.0625, lane) * tl.sum(i_hi, axis=2).to(tl.float32)
    part -= tl.reshape(mn_lo, shape) * tl.reshape(sum_lo, lane)
    part -= tl.reshape(mn_hi, shape) * tl.reshape(sum_hi, lane)
    return part


@triton.jit
def _load_sub_block_x(x_ptrs, x_ok, USE_ASM: tl.constexpr):
    """A sub-block's 32 x values as 4 fp32 tiles [KL, 8] (elements 8 p + e), 127 / amax (0 for an
    all-zero block), its scale amax / 127 and its exact sum (each [KL, 1])."""
    x0 = _to_f32(tl.load(x_ptrs, mask=x_ok, other=0.0), USE_ASM)
    x1 = _to_f32(tl.load(x_ptrs + 8, mask=x_ok, other=0.0), USE_ASM)
    x2 = _to_f32(tl.load(x_ptrs + 16, mask=x_ok, other=0.0), USE_ASM)
    x3 = _to_f32(tl.load(x_ptrs + 24, mask=x_ok, other=0.0), USE_ASM)
    amax = tl.maximum(tl.maximum(tl.abs(x0), tl.abs(x1)), tl.maximum(tl.abs(x2), tl.abs(x3)))
    amax = tl.max(amax, axis=1, keep_dims=True)
    inv = tl.where(amax > 0.0, 127.0 / tl.maximum(amax, 1e-30), 0.0)
    total = tl.sum((x0 + x1) + (x2 + x3), axis=1, keep_dims=True)
    return x0, x1, x2, x3, inv, amax / 127.0, total


@triton.jit
def _dp4a_step(
    i_lo,
    i_hi,
    q_words,
    x_lo,
    x_hi,
    inv_lo,
    inv_hi,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    """2 quant words of each lane's group ([BLOCK_N * KL, 2] pointers) against the 8 + 8 x values
    they meet (x_lo, x_hi [KL, 8] fp32; byte b of word c meets element 4 c + b): the int32 sums
    i_lo [BLOCK_N, KL, 2] += low nibbles * int8 x_lo, i_hi += 16 * high nibbles * int8 x_hi, per
    word. One LOP3 and one dp4a a word each (the high nibbles stay in place: 16 q < 256)."""
    xq_lo = tl.reshape(_int8_words(x_lo, inv_lo, KL, USE_ASM), (1, KL, 2))
    xq_hi = tl.reshape(_int8_words(x_hi, inv_hi, KL, USE_ASM), (1, KL, 2))
    qw = tl.reshape(tl.load(q_words), (BLOCK_N, KL, 2))
    xq_lo = tl.broadcast_to(xq_lo, (BLOCK_N, KL, 2))
    xq_hi = tl.broadcast_to(xq_hi, (BLOCK_N, KL, 2))
    if USE_ASM:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t;
            and.b32 t, $2, 0x0F0F0F0F;
            dp4a.u32.s32 $0, t, $3, $5;
            and.b32 t, $2, 0xF0F0F0F0;
            dp4a.u32.s32 $1, t, $4, $6;
            }""",
            constraints="=r,=r,r,r,r,r,r",
            args=[qw, xq_lo, xq_hi, i_lo, i_hi],
            dtype=(tl.int32, tl.int32),
            is_pure=True,
            pack=1,
        )
    else:
        return i_lo + _dp4a_twin(qw & 0x0F0F0F0F, xq_lo), i_hi + _dp4a_twin(
            qw & -0x0F0F0F10, xq_hi
        )  # 0xF0F0F0F0


@triton.jit
def _dp4a_twin(a, b):
    """dp4a.u32.s32 of a (4 unsigned bytes) and b (4 signed bytes) in plain Triton."""
    s = ((a >> 0) & 0xFF) * ((b << 24) >> 24)
    s += ((a >> 8) & 0xFF) * ((b << 16) >> 24)
    s += ((a >> 16) & 0xFF) * ((b << 8) >> 24)
    return s + ((a >> 24) & 0xFF) * (b >> 24)


@triton.jit
def _int8_words(x, inv, KL: tl.constexpr, USE_ASM: tl.constexpr):
    """x [KL, 8] fp32 times inv [KL, 1] (|x * inv| <= 127) rounded to int8, 4 to a word: [KL, 2]
    int32, byte b of word c from element 4 c + b. One fma adds 1.5 * 2**23 to the exact product
    (one rounding, to nearest even, as `q4k_int8x_ref`; the interpreter's fma rounds once too)
    and the low byte is kept; PRMT packs on the GPU."""
    r = tl.fma(x, inv, _ROUND_MAGIC).to(tl.int32, bitcast=True)
    even, odd = tl.split(tl.reshape(r, (KL, 2, 2, 2)))  # elements 4 c + 2 u / 4 c + 2 u + 1
    b0, b2 = tl.split(even)
    b1, b3 = tl.split(odd)
    if USE_ASM:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t, u;
            prmt.b32 t, $1, $2, 0x0040;
            prmt.b32 u, $3, $4, 0x0040;
            prmt.b32 $0, t, u, 0x5410;
            }""",
            constraints="=r,r,r,r,r",
            args=[b0, b1, b2, b3],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        return (b0 & 0xFF) | ((b1 & 0xFF) << 8) | ((b2 & 0xFF) << 16) | (b3 << 24)


def int8_x_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] as the kernel rounds it, per 32 values: (xq [..., K / 32, 32] float32 integers in
    [-127, 127], dx [..., K / 32]), x ~= dx * xq; xq is the exact product x * (127 / amax) rounded
    once, half to even (the kernel's fma)."""
    xf = x.float().reshape(*x.shape[:-1], -1, 32)
    amax = xf.abs().amax(dim=-1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    xq = torch.round(xf.double() * inv.double()).float()
    return xq, (amax / 127.0).squeeze(-1)


def q4k_int8x_ref(x: torch.Tensor, weight_data: torch.Tensor, in_features: int) -> torch.Tensor:
    """What q4k_int8x_kernel computes, in torch: x [1, K] rounded by `int8_x_blocks`, the Q4_K
    rows' (d * sc, dmin * m, q) from gguf's layout, fp32 sums -> [1, rows] fp32."""
    xq, dx = int8_x_blocks(x[0])  # [K / 32, 32], [K / 32]
    scale, minimum, q = q4k_fields(weight_data, in_features)  # [rows, K / 32] x2, [rows, K / 32, 32]
    int_sums = (q.float() * xq[None]).sum(dim=2)  # exact: integers below 2**24
    x_sums = x[0].float().reshape(-1, 32).sum(dim=1)
    return ((scale * dx[None]) * int_sums - minimum * x_sums[None]).sum(dim=1)[None]
