"""Tensor-core quantized GEMM for a few tokens (decode batches): Q4_K and Q6_K.

Shapes:
    quant_matmul_mma: x [num_tokens <= MMA_MAX_TOKENS, in_features] bf16 / fp16 / fp32, weight
                      QuantizedWeight [out_features, in_features] (Q4_K or Q6_K), bias
                      [out_features] or None -> [num_tokens, out_features] in x's dtype

Why: at 2-64 tokens a step still reads every weight once, so it should cost about what one token
costs. The dequantize-then-GEMM path writes and reads a dense copy (3.5x the bytes), and the
CUDA-core GEMV spends one FMA per weight per token. Here (as Marlin does for int4) each program
streams BLOCK_N rows of super-blocks once and feeds them to the tensor cores against all tokens
(padded to T_PAD: 16, 32, 64). Programs split the rows and, with SPLIT_K > 1, the super-blocks.

Forms (MmaConfig):
- `words` (the picks, MMA_CONFIGS): the quants are read as whole words (Q4_K: 32 int32 a row and
  super-block, 16-byte loads pipelined through shared memory; Q6_K, whose 210-byte rows are only
  2-byte aligned: ql and qh as halfwords) and dequantized in registers by a magic-number asm into
  planes (Q4_K: 8 of 32 weights, nibble h of byte b of every word; Q6_K: 8 of 16 a half
  super-block), two half-precision weights an instruction pair, the scale and min applied there:
  w = q * bf16(d*sc) - bf16(dmin*m), rounded once to x's dtype. x comes permuted to the planes'
  order by one small kernel a call (`words_x`), so each plane is one dot with no gather. Split K
  without atomics on the output: the last split of a row tile adds the fp32 partials in split
  order (`_store_reduced`), so a batch's tokens are the same on every run.
- `sub`: one sub-block at a time, the integer quants to the tensor cores as they are and the
  sub-block's scale after the dot, the min (Q4_K) or offset (Q6_K) through each sub-block's sum of
  x (one reduce kernel a call); `magic` makes a quant 128 + q by a mantissa OR and takes
  128 * sum(x) back out. Split K adds fp32 partials with atomics (the caller casts).
- `whole`: a super-block's [BLOCK_N, 256] weights dequantized in fp32, rounded to x's dtype, one
  K = 256 dot (Q6_K: two of 128).

Measured (H200, Triton 3.6): the words form's loop is about 690 SASS instructions a super-block
per thread against 1,300 for the magic sub-block form; the 5 Llama-3.1-8B shapes at 8 tokens,
Q4_K 288 us against the sub-block form's 410, Q6_K 552 against 910, still issue-bound at 15-40%
of the copy ceiling (bench/results/2026-12-03-h200-q4k-words/; the sub-block and whole forms'
sweeps: bench/results/2026-12-02-h200-gguf-mma/, 2026-12-02-h200-q4km-peer/). Tuned configs of
another card come in through KVSPILL_MMA_CONFIGS (below MMA_CONFIGS).

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

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv_lane import _f16_bits
from kvspill.kernels.pdl import pdl_meta, pdl_wait
from kvspill.kernels.triton_compat import tl, triton

MMA_MAX_TOKENS = 64
MMA_TYPES = ("Q4_K", "Q6_K")
# A config's split_k applies to weights of at most this many rows (an 8B's qkv, o and down): with
# more, the row tiles alone fill the card and a split only adds the atomics.
SPLIT_K_MAX_ROWS = 8192
# MMA_CONFIGS' token counts: a call's count rounded up to a power of two.
MMA_TOKEN_KEYS = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class MmaConfig:
    block_n: int  # weight rows per program
    num_warps: int
    # Programs per row tile along K (> 1: partial sums, added in order by the words form, by fp32
    # atomics in the others); see SPLIT_K_MAX_ROWS.
    split_k: int = 1
    num_stages: int = 1
    magic: bool = False  # sub-block form: quants become 128 + q by a mantissa OR, not a convert
    # Each super-block's [block_n, 256] weights dequantized in registers (rounded to x's dtype),
    # then one K = 256 dot (Q6_K: 2 of 128), instead of K = 32 (16) dots with the scales after.
    whole: bool = False
    # Quants read as whole words (Q4_K: int32; Q6_K: halfwords), dequantized in registers (half
    # x: by magic-number asm) into planes, each one dot against x permuted to match (`words_x`).
    words: bool = False

    def __post_init__(self) -> None:
        def power_of_two(v: object, low: int) -> bool:
            return type(v) is int and v >= low and v & (v - 1) == 0

        ok = power_of_two(self.block_n, 16) and power_of_two(self.num_warps, 1)
        ok = ok and type(self.split_k) is int and self.split_k >= 1
        ok = ok and type(self.num_stages) is int and self.num_stages >= 1
        flags = (self.magic, self.whole, self.words)
        ok = ok and all(isinstance(f, bool) for f in flags) and not (self.whole and self.words)
        if not ok:
            raise ValueError(
                f"{self}: block_n a power of two >= 16, num_warps a power of two, split_k and "
                "num_stages integers >= 1, magic, whole and words true or false (not whole and words)"
            )


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
):
    """acc += one Q4_K super-block of the program's rows (256 weights a row, 144 bytes at `base`
    [BLOCK_N]): d@0 | dmin@2 | scales[12]@4 | qs[128]@16; sub-block s (32 weights) takes the
    (s % 2) nibble of qs[(s // 2) * 32 : +32]; w = d*sc * q - dmin*m."""
    words = base.to(tl.pointer_type(tl.int32))
    w0 = tl.load(words, mask=n_ok, other=0)
    w1 = tl.load(words + 1, mask=n_ok, other=0)
    w2 = tl.load(words + 2, mask=n_ok, other=0)
    w3 = tl.load(words + 3, mask=n_ok, other=0)
    d = _f16_bits(w0 & 0xFFFF)
    dmin = _f16_bits((w0 >> 16) & 0xFFFF)
    col = tl.arange(0, 32)
    for j in tl.static_range(4):
        qs = tl.load(base[:, None] + 16 + 32 * j + col[None, :], mask=n_ok[:, None], other=0)
        for h in tl.static_range(2):
            sc, m = _q4k_scale_min(w1, w2, w3, 2 * j + h)
            if h == 0:
                q = qs & 0xF
            else:
                q = qs >> 4
            k = k0 + 64 * j + 32 * h
            p, xsum = _dot_sub_block(
                q, x_ptr, stride_x, xs_ptr, stride_xs, k, t, t_ok, 32, 0, DOT_DTYPE, MAGIC
            )
            acc = acc + (d * sc)[:, None] * p - (dmin * m)[:, None] * xsum
    return acc


@triton.jit
def _q4k_dsc_dm(base, n_ok):
    """(d*sc, dmin*m) [BLOCK_N, 8] fp32 of the 8 sub-blocks of the Q4_K super-blocks at `base`
    [BLOCK_N]: sub-block s's 6-bit (sc, m) are bytes s and s + 4 of scales[12] for s < 4, else
    the nibbles of byte s + 4 and the top bits of bytes s - 4 and s (ggml's get_scale_min_k4)."""
    d = tl.load((base + 0).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
    dmin = tl.load((base + 2).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
    s = tl.arange(0, 8)[None, :]
    row_ok = n_ok[:, None]
    b_s = tl.load(base[:, None] + 4 + s, mask=row_ok, other=0).to(tl.int32)  # byte s
    b_s4 = tl.load(base[:, None] + 8 + s, mask=row_ok, other=0).to(tl.int32)  # byte s + 4
    b_lo = tl.load(base[:, None] + 4 + (s % 4), mask=row_ok, other=0).to(tl.int32)  # byte s - 4 (s >= 4)
    first = s < 4
    sc = tl.where(first, b_s & 63, (b_s4 & 0xF) | ((b_lo >> 6) << 4))
    m = tl.where(first, b_s4 & 63, (b_s4 >> 4) | ((b_s >> 6) << 4))
    return d[:, None] * sc.to(tl.float32), dmin[:, None] * m.to(tl.float32)


@triton.jit
def _q4k_super_block_whole(acc, base, n_ok, x_ptr, stride_x, k0, t, t_ok, DOT_DTYPE: tl.constexpr):
    """acc += one Q4_K super-block of the program's rows as one K = 256 dot: the weights
    d*sc * q - dmin*m dequantized in registers in the order (group j, byte l, nibble h), so
    column c = 64 j + 2 l + h holds weight 64 j + 32 h + l (a reshape of the joined nibbles, no
    permute), and x is loaded in that order."""
    dsc, dm = _q4k_dsc_dm(base, n_ok)
    dsc = tl.reshape(dsc, (base.shape[0], 4, 1, 2))
    dm = tl.reshape(dm, (base.shape[0], 4, 1, 2))
    j = tl.arange(0, 4)[None, :, None]
    byte = tl.arange(0, 32)[None, None, :]
    qs = tl.load(base[:, None, None] + 16 + 32 * j + byte, mask=n_ok[:, None, None], other=0)
    q = tl.join(qs & 0xF, qs >> 4).to(tl.float32)  # [BLOCK_N, 4, 32, 2]: (j, l, h)
    w = tl.reshape((dsc * q - dm).to(DOT_DTYPE), (base.shape[0], 256))
    c = tl.arange(0, 256)
    k = k0 + 64 * (c // 64) + 32 * (c % 2) + (c % 64) // 2
    x = tl.load(x_ptr + t[None, :] * stride_x + k[:, None], mask=t_ok[None, :], other=0.0)
    return tl.dot(w, x.to(DOT_DTYPE), acc, input_precision="ieee")


# The words form's dequantization (`_q4k_words_half`), per two qs words A and B (4 bytes each)
# of one row and 32-byte group: output m = 2 b + h is the pair (nibble h of byte b of A, the same
# of B) in x's half dtype. prmt brings byte b of A and of B into the two 16-bit halves (the other
# bytes are masked off), a lop3 keeps nibble h and ORs it into the mantissa of 128.0 (bf16
# 0x4300; fp16 1024.0 = 0x6400, step 1 there), one fma takes the 128 (1024) back out exactly and
# one applies the sub-block's scale and min: w = q * (d*sc) + (-dmin*m), rounded once. Two
# weights an instruction pair: about 2 instructions a weight, against 10-16 for the forms that
# extract bytes and convert each quant (SASS of Triton 3.6, sm_90).
_Q4_WORDS_ASM = """{
.reg .b32 p, q, one, minus;
mov.b32 one, ONE;
mov.b32 minus, MINUS;
PAIRS
}"""
_Q4_WORDS_PAIR = """prmt.b32 p, $8, $9, SEL;
lop3.b32 q, p, 0x000F000F, MAGIC, 0xEA;
fma.rn.TYPE q, q, one, minus;
fma.rn.TYPE $LO, q, $10, $11;
shr.u32 p, p, 4;
lop3.b32 q, p, 0x000F000F, MAGIC, 0xEA;
fma.rn.TYPE q, q, one, minus;
fma.rn.TYPE $HI, q, $12, $13;"""


def _q4_words_asm(kind: str, magic: str, one: str, minus: str) -> str:
    """The asm above for one half type: its pair type, the magic float, 1.0 and -magic as pairs.
    Byte b's selector takes A's byte b into bytes 0-1 and B's into bytes 2-3."""
    pairs = []
    for b in range(4):
        sel = f"0x{4 + b:x}{4 + b:x}{b:x}{b:x}"
        pair = _Q4_WORDS_PAIR.replace("SEL", sel).replace("$LO", f"${2 * b}").replace("$HI", f"${2 * b + 1}")
        pairs.append(pair)
    text = _Q4_WORDS_ASM.replace("PAIRS", "\n".join(pairs))
    return text.replace("TYPE", kind).replace("MAGIC", magic).replace("ONE", one).replace("MINUS", minus)


_Q4_WORDS_BF16 = tl.constexpr(_q4_words_asm("bf16x2", "0x43004300", "0x3F803F80", "0xC300C300"))
_Q4_WORDS_F16 = tl.constexpr(_q4_words_asm("f16x2", "0x64006400", "0x3C003C00", "0xE400E400"))
_Q4_WORDS_CONSTRAINTS = tl.constexpr("=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r")


@triton.jit
def _q4k_words_half(words, dsc_lo, ndm_lo, dsc_hi, ndm_hi, DOT_DTYPE: tl.constexpr):
    """The 8 (byte b, nibble h) planes of the qs `words` [BLOCK_N, 4, 8] int32 dequantized in x's
    half dtype by the asm above; scales and negated mins [BLOCK_N, 4, 1] (per group j) in fp32."""
    args = [words, dsc_lo.to(DOT_DTYPE), ndm_lo.to(DOT_DTYPE), dsc_hi.to(DOT_DTYPE), ndm_hi.to(DOT_DTYPE)]
    if DOT_DTYPE == tl.bfloat16:
        planes = tl.inline_asm_elementwise(
            _Q4_WORDS_BF16, _Q4_WORDS_CONSTRAINTS, args, dtype=(tl.bfloat16,) * 8, is_pure=True, pack=2
        )
    else:
        planes = tl.inline_asm_elementwise(
            _Q4_WORDS_F16, _Q4_WORDS_CONSTRAINTS, args, dtype=(tl.float16,) * 8, is_pure=True, pack=2
        )
    return planes


@triton.jit
def _q4k_plane_f32(words, dsc, dm, b: tl.constexpr, h: tl.constexpr):
    """Plane (b, h) of `words` dequantized in fp32 (x in fp32, and Triton's interpreter)."""
    return ((words >> (8 * b + 4 * h)) & 0xF).to(tl.float32) * dsc - dm


@triton.jit
def _dot_plane(acc, w, xt_ptr, sb, m: tl.constexpr, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """acc += plane m's weights [BLOCK_N, 32] (words in order j, i) @ its 32 x columns, read from
    the permuted x^T (`words_x`) [super-block, m, 32, T_PAD]."""
    r = tl.arange(0, 32)
    x = tl.load(xt_ptr + ((sb * 8 + m) * 32 + r)[:, None] * T_PAD + t[None, :])
    w2 = tl.reshape(w, (w.shape[0], 32)).to(DOT_DTYPE)
    return tl.dot(w2, x.to(DOT_DTYPE), acc, input_precision="ieee")


@triton.jit
def _q4k_super_block_words(
    acc, base, n_ok, xt_ptr, sb, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr, ASM: tl.constexpr
):
    """acc += one Q4_K super-block of the program's rows, its qs read as 32 int32 words a row
    (16-byte loads) and cut into 8 planes: plane m = 2 b + h holds nibble h of byte b of every
    word, i.e. word w = 8 j + i gives weight 64 j + 32 h + 4 i + b (sub-block 2 j + h); x comes
    permuted to that order (`words_x`), so each plane is one K = 32 dot, no gather."""
    N: tl.constexpr = base.shape[0]
    dsc, dm = _q4k_dsc_dm(base, n_ok)
    dsc_lo, dsc_hi = tl.split(tl.reshape(dsc, (N, 4, 2)))  # [N, 4]: sub-blocks 2 j and 2 j + 1
    dm_lo, dm_hi = tl.split(tl.reshape(dm, (N, 4, 2)))
    dsc_lo, dsc_hi = dsc_lo[:, :, None], dsc_hi[:, :, None]
    dm_lo, dm_hi = dm_lo[:, :, None], dm_hi[:, :, None]
    w = tl.arange(0, 32)
    words = tl.load(
        (base + 16).to(tl.pointer_type(tl.int32))[:, None] + w[None, :], mask=n_ok[:, None], other=0
    )
    words = tl.reshape(words, (N, 4, 8))
    if ASM:
        p0, p1, p2, p3, p4, p5, p6, p7 = _q4k_words_half(words, dsc_lo, -dm_lo, dsc_hi, -dm_hi, DOT_DTYPE)
    else:
        p0 = _q4k_plane_f32(words, dsc_lo, dm_lo, 0, 0)
        p1 = _q4k_plane_f32(words, dsc_hi, dm_hi, 0, 1)
        p2 = _q4k_plane_f32(words, dsc_lo, dm_lo, 1, 0)
        p3 = _q4k_plane_f32(words, dsc_hi, dm_hi, 1, 1)
        p4 = _q4k_plane_f32(words, dsc_lo, dm_lo, 2, 0)
        p5 = _q4k_plane_f32(words, dsc_hi, dm_hi, 2, 1)
        p6 = _q4k_plane_f32(words, dsc_lo, dm_lo, 3, 0)
        p7 = _q4k_plane_f32(words, dsc_hi, dm_hi, 3, 1)
    acc = _dot_plane(acc, p0, xt_ptr, sb, 0, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane(acc, p1, xt_ptr, sb, 1, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane(acc, p2, xt_ptr, sb, 2, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane(acc, p3, xt_ptr, sb, 3, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane(acc, p4, xt_ptr, sb, 4, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane(acc, p5, xt_ptr, sb, 5, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane(acc, p6, xt_ptr, sb, 6, t, T_PAD, DOT_DTYPE)
    return _dot_plane(acc, p7, xt_ptr, sb, 7, t, T_PAD, DOT_DTYPE)


def q4k_words_x_ref(x: torch.Tensor, t_pad: int) -> torch.Tensor:
    """x [tokens, K] permuted for the words form: [K / 256, 8 planes, 32, t_pad], zero past the
    tokens; plane m = 2 b + h, row r = 8 j + i holds x's column 64 j + 32 h + 4 i + b."""
    tokens, k = x.shape
    xt = x.new_zeros((k // 256, 4, 2, 4, 8, t_pad))  # (super-block, b, h, j, i, token)
    xt[..., :tokens] = x.reshape(tokens, k // 256, 4, 2, 8, 4).permute(1, 5, 3, 2, 4, 0)
    return xt.view(k // 256, 8, 32, t_pad)


@triton.jit
def _q4k_words_x_kernel(
    x_ptr, xt_ptr, counter_ptr, num_counters, num_tokens, stride_x, T_PAD: tl.constexpr, PDL: tl.constexpr
):
    """One program per super-block: `q4k_words_x_ref`'s [8 * 32, T_PAD] slab, in one pass."""
    pdl_wait(PDL)
    sb = tl.program_id(0)
    c = tl.arange(0, 256)  # (m, r): m = 2 b + h, r = 8 j + i
    b, h, j, i = c // 64, (c // 32) % 2, (c % 32) // 8, c % 8
    col = sb * 256 + 64 * j + 32 * h + 4 * i + b
    t = tl.arange(0, T_PAD)
    x = tl.load(x_ptr + t[None, :] * stride_x + col[:, None], mask=(t < num_tokens)[None, :], other=0.0)
    tl.store(xt_ptr + (sb * 256 + c)[:, None] * T_PAD + t[None, :], x)
    _zero_counters(counter_ptr, num_counters)


@triton.jit
def _q6k_super_block(
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
    """acc += one Q6_K super-block of the program's rows (256 weights a row, 210 bytes at `base`
    [BLOCK_N], only 2-byte aligned: bytes and one fp16): ql[128]@0 | qh[64]@128 | scales
    int8[16]@192 | d@208. Sub-block s = 8*h + 2*j + g (16 weights; half h, quarter j, 16-group g)
    takes nibble j // 2 of ql[64h + 32(j % 2) + 16g : +16] and bits 2j..2j+1 of
    qh[32h + 16g : +16] << 4 (ggml's dequantize_row_q6_K); w = d*scales[s] * (q - 32)."""
    d = tl.load((base + 208).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
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
                sc = tl.load((base + 192 + s).to(tl.pointer_type(tl.int8)), mask=n_ok, other=0)
                k = k0 + 16 * s
                p, _ = _dot_sub_block(
                    q, x_ptr, stride_x, xs_ptr, stride_xs, k, t, t_ok, 16, 32, DOT_DTYPE, MAGIC
                )
                acc += (d * sc.to(tl.float32))[:, None] * p
    return acc


@triton.jit
def _q6k_half_whole(
    acc, base, n_ok, x_ptr, stride_x, k0, half: tl.constexpr, t, t_ok, DOT_DTYPE: tl.constexpr
):
    """acc += half `half` (128 weights) of one Q6_K super-block of the program's rows as one
    K = 128 dot: byte l of ql[64 h:], ql[64 h + 32:] and qh[32 h:] holds the quants of weights
    l + 32 i (i = 0..3: low / high nibble of either ql byte, bits 2 i of qh) with scale
    scales[8 h + l // 16 + 2 i]; column c = 4 l + 2 nib + ab holds i = ab + 2 nib (a reshape of
    the joined quants), and x is loaded in that order. w = d*scale * (q - 32), in x's dtype."""
    N: tl.constexpr = base.shape[0]
    d = tl.load((base + 208).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
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
    sc_at = base[:, None, None, None, None] + 192 + 8 * half + lg + 2 * (ab + 2 * nib)
    sc = tl.load(sc_at.to(tl.pointer_type(tl.int8)), mask=n_ok[:, None, None, None, None], other=0)
    scale = d[:, None, None, None, None] * sc.to(tl.float32)
    w = tl.reshape((scale * (q.to(tl.float32) - 32.0)).to(DOT_DTYPE), (N, 128))
    c = tl.arange(0, 128)
    k = k0 + 128 * half + c // 4 + 32 * (c % 2 + 2 * ((c // 2) % 2))
    x = tl.load(x_ptr + t[None, :] * stride_x + k[:, None], mask=t_ok[None, :], other=0.0)
    return tl.dot(w, x.to(DOT_DTYPE), acc, input_precision="ieee")


# The Q6_K words form's dequantization (`_q6k_words_half`), per two elements A and B of one half
# super-block (2-byte aligned rows: halfwords, two per register): ql_a = ql[64 h + 2 p : +2],
# ql_b = ql[64 h + 32 + 2 p : +2], qh = qh[32 h + 2 p : +2] hold, for byte e of each, the quants of
# weights 32 i + 2 p + e (i = 0..3: the low nibble of ql_a, of ql_b, the high of ql_a, of ql_b,
# with bits 2 i of qh above). Output (i, e) is that quant's pair (A's, B's): the nibble and the
# two qh bits (shifted to bits 4-5) ORed into the mantissa of 128.0 (fp16 1024.0), one fma takes
# 128 + 32 (1024 + 32) out exactly (q - 32 in -32..31), one fma applies d * scale: rounded once.
_Q6_WORDS_PAIR = """shr.u32 a, QL, QLS;
QHOP b, $10, QHS;
lop3.b32 b, b, 0x00300030, MAGIC, 0xEA;
lop3.b32 q, a, 0x000F000F, b, 0xEA;
fma.rn.TYPE q, q, one, minus;
fma.rn.TYPE $OUT, q, SC, zero;"""


def _q6_words_asm(kind: str, magic: str, one: str, minus: str) -> str:
    """The Q6_K asm for one half type (the pair type, the magic float, 1.0, -(magic + 32))."""
    pairs = []
    for i in range(4):
        for e in range(2):
            shift = 2 * i + 8 * e - 4  # qh's bits 2 i (+ 8 e) to bits 4-5 of each halfword
            pair = _Q6_WORDS_PAIR.replace("QLS", str(4 * (i // 2) + 8 * e)).replace("QL", f"${8 + i % 2}")
            qh_op = "shr.u32" if shift >= 0 else "shl.b32"
            pair = pair.replace("QHOP", qh_op).replace("QHS", str(abs(shift)))
            pairs.append(pair.replace("$OUT", f"${2 * i + e}").replace("SC", f"${11 + i}"))
    text = "{\n.reg .b32 a, b, q, one, minus, zero;\nmov.b32 one, ONE;\nmov.b32 minus, MINUS;\n"
    text += "mov.b32 zero, 0;\n" + "\n".join(pairs) + "\n}"
    return text.replace("TYPE", kind).replace("MAGIC", magic).replace("ONE", one).replace("MINUS", minus)


_Q6_WORDS_BF16 = tl.constexpr(_q6_words_asm("bf16x2", "0x43004300", "0x3F803F80", "0xC320C320"))
_Q6_WORDS_F16 = tl.constexpr(_q6_words_asm("f16x2", "0x64006400", "0x3C003C00", "0xE420E420"))
_Q6_WORDS_CONSTRAINTS = tl.constexpr("=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r")


@triton.jit
def _q6k_words_half(ql_a, ql_b, qh, s0, s1, s2, s3, DOT_DTYPE: tl.constexpr):
    """The 8 (i, e) planes [BLOCK_N, 16] of one half super-block in x's half dtype, by the asm
    above; s0..s3: d * scale of each element's weight, per i, fp32."""
    args = [ql_a, ql_b, qh, s0.to(DOT_DTYPE), s1.to(DOT_DTYPE), s2.to(DOT_DTYPE), s3.to(DOT_DTYPE)]
    if DOT_DTYPE == tl.bfloat16:
        planes = tl.inline_asm_elementwise(
            _Q6_WORDS_BF16, _Q6_WORDS_CONSTRAINTS, args, dtype=(tl.bfloat16,) * 8, is_pure=True, pack=2
        )
    else:
        planes = tl.inline_asm_elementwise(
            _Q6_WORDS_F16, _Q6_WORDS_CONSTRAINTS, args, dtype=(tl.float16,) * 8, is_pure=True, pack=2
        )
    return planes


@triton.jit
def _q6k_plane_f32(ql, qh, scale, i: tl.constexpr, e: tl.constexpr):
    """Plane (i, e) of one half super-block in fp32 (x in fp32, and Triton's interpreter)."""
    low = (ql.to(tl.int32) >> (4 * (i // 2) + 8 * e)) & 0xF
    high = (qh.to(tl.int32) >> (2 * i + 8 * e)) & 3
    return ((low | (high << 4)) - 32).to(tl.float32) * scale


@triton.jit
def _q6k_scales(base, n_ok, d, half: tl.constexpr, i: tl.constexpr):
    """d * scales[8 half + 2 i + p // 8] for the 16 elements p of plane i: [BLOCK_N, 16] fp32."""
    g = tl.arange(0, 2)[None, :]
    sc = tl.load(
        (base[:, None] + 192 + 8 * half + 2 * i + g).to(tl.pointer_type(tl.int8)), mask=n_ok[:, None], other=0
    )
    scale = d[:, None] * sc.to(tl.float32)  # [BLOCK_N, 2]
    return tl.reshape(tl.broadcast_to(scale[:, :, None], (base.shape[0], 2, 8)), (base.shape[0], 16))


@triton.jit
def _q6k_half_words(
    acc,
    base,
    n_ok,
    d,
    xt_ptr,
    sb,
    half: tl.constexpr,
    t,
    T_PAD: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ASM: tl.constexpr,
):
    """acc += half `half` of one Q6_K super-block: ql and qh read as halfwords [BLOCK_N, 16] (the
    rows are only 2-byte aligned), cut into 8 planes (i, e) of 16 weights 128 half + 32 i + 2 p + e,
    each one K = 16 dot against its rows of the permuted x (`words_x`)."""
    p = tl.arange(0, 16)[None, :]
    row = base[:, None]
    ql_a = tl.load((row + 64 * half).to(tl.pointer_type(tl.int16)) + p, mask=n_ok[:, None], other=0)
    ql_b = tl.load((row + 64 * half + 32).to(tl.pointer_type(tl.int16)) + p, mask=n_ok[:, None], other=0)
    qh = tl.load((row + 128 + 32 * half).to(tl.pointer_type(tl.int16)) + p, mask=n_ok[:, None], other=0)
    s0 = _q6k_scales(base, n_ok, d, half, 0)
    s1 = _q6k_scales(base, n_ok, d, half, 1)
    s2 = _q6k_scales(base, n_ok, d, half, 2)
    s3 = _q6k_scales(base, n_ok, d, half, 3)
    if ASM:
        w0, w1, w2, w3, w4, w5, w6, w7 = _q6k_words_half(ql_a, ql_b, qh, s0, s1, s2, s3, DOT_DTYPE)
    else:
        w0, w1 = _q6k_plane_f32(ql_a, qh, s0, 0, 0), _q6k_plane_f32(ql_a, qh, s0, 0, 1)
        w2, w3 = _q6k_plane_f32(ql_b, qh, s1, 1, 0), _q6k_plane_f32(ql_b, qh, s1, 1, 1)
        w4, w5 = _q6k_plane_f32(ql_a, qh, s2, 2, 0), _q6k_plane_f32(ql_a, qh, s2, 2, 1)
        w6, w7 = _q6k_plane_f32(ql_b, qh, s3, 3, 0), _q6k_plane_f32(ql_b, qh, s3, 3, 1)
    first = sb * 16 + half * 8  # plane index of (half, 0, 0) in x's [super-block, 16 planes] rows
    acc = _dot_plane16(acc, w0, xt_ptr, first + 0, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane16(acc, w1, xt_ptr, first + 1, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane16(acc, w2, xt_ptr, first + 2, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane16(acc, w3, xt_ptr, first + 3, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane16(acc, w4, xt_ptr, first + 4, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane16(acc, w5, xt_ptr, first + 5, t, T_PAD, DOT_DTYPE)
    acc = _dot_plane16(acc, w6, xt_ptr, first + 6, t, T_PAD, DOT_DTYPE)
    return _dot_plane16(acc, w7, xt_ptr, first + 7, t, T_PAD, DOT_DTYPE)


@triton.jit
def _q6k_super_block_words(acc, base, n_ok, xt_ptr, sb, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """acc += one Q6_K super-block of the program's rows in the words form (both halves)."""
    d = tl.load((base + 208).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
    for half in tl.static_range(2):
        acc = _q6k_half_words(
            acc, base, n_ok, d, xt_ptr, sb, half, t, T_PAD, DOT_DTYPE, DOT_DTYPE != tl.float32
        )
    return acc


@triton.jit
def _dot_plane16(acc, w, xt_ptr, plane, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """acc += one Q6_K plane's weights [BLOCK_N, 16] @ its 16 rows of the permuted x."""
    r = tl.arange(0, 16)
    x = tl.load(xt_ptr + (plane * 16 + r)[:, None] * T_PAD + t[None, :])
    return tl.dot(w.to(DOT_DTYPE), x.to(DOT_DTYPE), acc, input_precision="ieee")


def q6k_words_x_ref(x: torch.Tensor, t_pad: int) -> torch.Tensor:
    """x [tokens, K] permuted for the Q6_K words form: [K / 256 * 16 planes, 16, t_pad], zero past
    the tokens; plane (half, i, e), row p holds x's column 128 half + 32 i + 2 p + e."""
    tokens, k = x.shape
    xt = x.new_zeros((k // 256, 2, 4, 2, 16, t_pad))  # (super-block, half, i, e, p, token)
    xt[..., :tokens] = x.reshape(tokens, k // 256, 2, 4, 16, 2).permute(1, 2, 3, 5, 4, 0)
    return xt.view(k // 256 * 16, 16, t_pad)


@triton.jit
def _q6k_words_x_kernel(
    x_ptr, xt_ptr, counter_ptr, num_counters, num_tokens, stride_x, T_PAD: tl.constexpr, PDL: tl.constexpr
):
    """One program per super-block: `q6k_words_x_ref`'s [16 * 16, T_PAD] slab, in one pass."""
    pdl_wait(PDL)
    sb = tl.program_id(0)
    c = tl.arange(0, 256)  # (half, i, e, p)
    half, i, e, p = c // 128, (c // 32) % 4, (c // 16) % 2, c % 16
    col = sb * 256 + 128 * half + 32 * i + 2 * p + e
    t = tl.arange(0, T_PAD)
    x = tl.load(x_ptr + t[None, :] * stride_x + col[:, None], mask=(t < num_tokens)[None, :], other=0.0)
    tl.store(xt_ptr + (sb * 256 + c)[:, None] * T_PAD + t[None, :], x)
    _zero_counters(counter_ptr, num_counters)


@triton.jit
def _zero_counters(counter_ptr, num_counters):
    """This program's share of the split-K arrival counters set to 0 (`_store_reduced`)."""
    per = tl.cdiv(num_counters, tl.num_programs(0))
    first = tl.program_id(0) * per
    for start in range(first, first + per, 256):
        c = start + tl.arange(0, 256)
        tl.store(
            counter_ptr + c, tl.zeros([256], dtype=tl.int32), mask=(c < first + per) & (c < num_counters)
        )


def words_x(x: torch.Tensor, qtype: str, t_pad: int, counters: torch.Tensor | None = None) -> torch.Tensor:
    """x permuted for `qtype`'s words form (`q4k_words_x_ref`, `q6k_words_x_ref`) in one kernel
    launch (a PDL launch where the card has it), which also zeroes `counters` (int32)."""
    tokens, k = x.shape
    shape = (k // 256, 8, 32, t_pad) if qtype == "Q4_K" else (k // 256 * 16, 16, t_pad)
    kernel = _q4k_words_x_kernel if qtype == "Q4_K" else _q6k_words_x_kernel
    xt = torch.empty(shape, dtype=x.dtype, device=x.device)
    zeroed = counters if counters is not None else xt  # num_counters 0: never written
    num_counters = 0 if counters is None else counters.numel()
    kernel[(k // 256,)](
        x, xt, zeroed, num_counters, tokens, x.stride(0), T_PAD=t_pad, num_warps=4, **pdl_meta(x.device)
    )
    return xt


@triton.jit
def _tile(rows, num_tokens, BLOCK_N: tl.constexpr, T_PAD: tl.constexpr):
    """The program's output tile: rows n [BLOCK_N] (n_ok: < rows) and tokens t [T_PAD] (t_ok)."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    t = tl.arange(0, T_PAD)
    return n, n < rows, t, t < num_tokens


@triton.jit
def _store(
    acc,
    bias_ptr,
    out_ptr,
    stride_o,
    n,
    n_ok,
    t,
    t_ok,
    SPLIT_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """out[t, n] = acc^T (+ bias, added by the first split only); SPLIT_K > 1: fp32 atomics."""
    if HAS_BIAS:
        if tl.program_id(1) == 0:
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
    tl.store(part_ptr + tl.program_id(1) * plane + offsets, acc, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = tl.zeros_like(acc)
        for split in tl.static_range(SPLIT_K):
            total += tl.load(part_ptr + split * plane + offsets, mask=mask, other=0.0, cache_modifier=".cg")
        if HAS_BIAS:
            total += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + t[None, :] * stride_o + n[:, None], total.to(out_ptr.dtype.element_ty), mask=mask)


# The two kernels differ in the super-block's bytes and arithmetic only; they stay two so that a
# profile names each type's time (an 8-sequence step: Q4_K 3.98 ms, Q6_K 2.93; bench/results/
# 2026-12-02-h200-q4km-peer/). Grid: (cdiv(rows, BLOCK_N), SPLIT_K). Program (i, s) takes rows [i*BLOCK_N, +BLOCK_N) and the super-blocks s,
# s + SPLIT_K, ...; x_sums [tokens, K / 32] (Q4_K) or [tokens, K / 16] (Q6_K).
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
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    WHOLE: tl.constexpr = False,
    WORDS: tl.constexpr = False,
    PDL: tl.constexpr = False,
):
    pdl_wait(PDL)  # the launch overlaps the kernel before (x comes from it: nothing read earlier)
    n, n_ok, t, t_ok = _tile(rows, num_tokens, BLOCK_N, T_PAD)
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    for sb in range(tl.program_id(1), num_blocks, SPLIT_K):
        base = row_ptr + sb * 144
        if WORDS:
            acc = _q4k_super_block_words(
                acc, base, n_ok, xs_ptr, sb, t, T_PAD, DOT_DTYPE, DOT_DTYPE != tl.float32
            )
        elif WHOLE:
            acc = _q4k_super_block_whole(acc, base, n_ok, x_ptr, stride_x, sb * 256, t, t_ok, DOT_DTYPE)
        else:
            acc = _q4k_super_block(
                acc, base, n_ok, x_ptr, stride_x, xs_ptr, stride_xs, sb * 256, t, t_ok, DOT_DTYPE, MAGIC
            )
    if WORDS and SPLIT_K > 1:
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
        _store(acc, bias_ptr, out_ptr, stride_o, n, n_ok, t, t_ok, SPLIT_K, HAS_BIAS)


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
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    WHOLE: tl.constexpr = False,
    WORDS: tl.constexpr = False,
    PDL: tl.constexpr = False,
):
    pdl_wait(PDL)
    n, n_ok, t, t_ok = _tile(rows, num_tokens, BLOCK_N, T_PAD)
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    for sb in range(tl.program_id(1), num_blocks, SPLIT_K):
        base = row_ptr + sb * 210
        if WORDS:
            acc = _q6k_super_block_words(acc, base, n_ok, xs_ptr, sb, t, T_PAD, DOT_DTYPE)
        elif WHOLE:
            for half in tl.static_range(2):
                acc = _q6k_half_whole(acc, base, n_ok, x_ptr, stride_x, sb * 256, half, t, t_ok, DOT_DTYPE)
        else:
            acc = _q6k_super_block(
                acc, base, n_ok, x_ptr, stride_x, xs_ptr, stride_xs, sb * 256, t, t_ok, DOT_DTYPE, MAGIC
            )
    if WORDS and SPLIT_K > 1:
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
        _store(acc, bias_ptr, out_ptr, stride_o, n, n_ok, t, t_ok, SPLIT_K, HAS_BIAS)


# Per type: (kernel, weights a sub-block, so a column of x_sums; the rows' byte alignment).
_KERNELS = {"Q4_K": (_q4k_mma_kernel, 32, 4), "Q6_K": (_q6k_mma_kernel, 16, 2)}


def mma_t_pad(num_tokens: int) -> int:
    """The token tile of `num_tokens` (the dot needs >= 16)."""
    return max(16, triton.next_power_of_2(num_tokens))


def _aligned(weight: QuantizedWeight, align: int) -> bool:
    return weight.data.data_ptr() % align == 0 and weight.data.stride(0) % align == 0


def check_mma_args(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> None:
    """The shape, type, layout and device contract of `quant_matmul_mma` (asserts only)."""
    assert weight.qtype in MMA_TYPES, f"the tensor-core kernel takes {MMA_TYPES}, got {weight.qtype}"
    assert x.dim() == 2 and x.stride(1) == 1, f"x must be [num_tokens, in_features], got {tuple(x.shape)}"
    assert 1 <= x.shape[0] <= MMA_MAX_TOKENS, f"1..{MMA_MAX_TOKENS} tokens, got {x.shape[0]}"
    assert x.shape[1] == weight.in_features, f"x has {x.shape[1]} features, weight {weight.in_features}"
    assert x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"unsupported x dtype {x.dtype}"
    assert x.device == weight.device, f"x on {x.device}, weight on {weight.device}"
    align = _KERNELS[weight.qtype][2]
    assert _aligned(weight, align), f"{weight.qtype} rows must be {align}-byte aligned"
    if bias is not None:
        assert bias.shape == (weight.out_features,) and bias.device == x.device, "bias must be [out_features]"


# Per (type, token count rounded up to a power of two): the config measured fastest on the
# Llama-3.1-8B shapes where it beat the other paths; the 5 shapes' summed us (H200, 2026-12-03,
# bench/results/2026-12-03-h200-q4k-words/): the words form, Q4_K at 3-32 tokens (8: 288 against
# the sub-block form's 410; 32: 358 against dequantize-then-GEMM's 1,039) and Q6_K at 5-32 (8: 552
# against the sub-block form's 910; 32: 786 against 1,483). A count without an entry keeps its old
# path (kernels/quant_linear.py): 2 tokens (Q4_K: the lane GEMV 278 against the words form's 284),
# Q6_K at 3-4 (the lane GEMV 487 against 549) and 33-64 (dequantize-then-GEMM; the words form
# untimed there).
_WORDS = MmaConfig(block_n=64, num_warps=4, split_k=4, num_stages=3, words=True)
MMA_CONFIGS: dict[tuple[str, int], MmaConfig] = {
    **{("Q4_K", t): _WORDS for t in (4, 8, 16, 32)},
    **{("Q6_K", t): _WORDS for t in (8, 16, 32)},
}
# A JSON file of configs tuned on this machine (`python -m kvspill.bench.mma_sweep` writes one):
# {"Q6_K,16": {"block_n": 64, "num_warps": 2, ...}, "Q4_K,4": null, ...}; null sends that count
# back to its old path. Read once, at import.
MMA_CONFIGS_ENV = "KVSPILL_MMA_CONFIGS"


def parse_mma_configs(text: str, source: str) -> dict[tuple[str, int], MmaConfig | None]:
    """The entries of a tuned-configs JSON (see MMA_CONFIGS_ENV); ValueError says what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{source}: not JSON ({e})") from e
    if not isinstance(raw, dict):
        raise ValueError(f'{source}: expected an object like {{"Q4_K,8": {{"block_n": 32, ...}}}}')
    entries: dict[tuple[str, int], MmaConfig | None] = {}
    for key, fields in raw.items():
        qtype, _, count = str(key).partition(",")
        if qtype not in MMA_TYPES or not count.isdigit() or int(count) not in MMA_TOKEN_KEYS:
            raise ValueError(
                f"{source}: key {key!r} must be TYPE,TOKENS with TYPE in {MMA_TYPES} and TOKENS 2..64, a power of two"
            )
        try:
            entries[(qtype, int(count))] = None if fields is None else MmaConfig(**fields)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: {key}: {e}") from e
    return entries


def _tuned_configs() -> None:
    path = os.environ.get(MMA_CONFIGS_ENV)
    if not path:
        return
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ValueError(f"{MMA_CONFIGS_ENV}={path}: {e.strerror}") from e
    for key, config in parse_mma_configs(text, f"{MMA_CONFIGS_ENV}={path}").items():
        if config is None:
            MMA_CONFIGS.pop(key, None)
        else:
            MMA_CONFIGS[key] = config


_tuned_configs()


def mma_config(weight: QuantizedWeight, num_tokens: int) -> MmaConfig | None:
    """The config `quant_linear` runs `num_tokens` tokens of `weight` with, or None: that count
    takes another path."""
    if weight.qtype not in MMA_TYPES or not 2 <= num_tokens <= MMA_MAX_TOKENS:
        return None
    if not _aligned(weight, _KERNELS[weight.qtype][2]):
        return None
    config = MMA_CONFIGS.get((weight.qtype, triton.next_power_of_2(num_tokens)))
    return None if config is None else for_rows(config, weight.out_features)


def for_rows(config: MmaConfig, rows: int) -> MmaConfig:
    """`config` as it runs on a weight of `rows` rows: no split K past SPLIT_K_MAX_ROWS."""
    return replace(config, split_k=1) if rows > SPLIT_K_MAX_ROWS else config


def _outputs(x: torch.Tensor, rows: int, cfg: MmaConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, part, counters) of one call: out in x's dtype, or zeroed fp32 for split K by atomics
    (the sub-block and whole forms); the words form's split K gets fp32 partials [split_k,
    tokens, rows] and a counter a row tile (zeroed by words_x); unused ones are `out`."""
    num_tokens = x.shape[0]
    atomics = cfg.split_k > 1 and not cfg.words
    out = torch.empty((num_tokens, rows), dtype=torch.float32 if atomics else x.dtype, device=x.device)
    if atomics:
        out.zero_()
    if not (cfg.words and cfg.split_k > 1):
        return out, out, out
    part = torch.empty((cfg.split_k, num_tokens, rows), dtype=torch.float32, device=x.device)
    counters = torch.empty(triton.cdiv(rows, cfg.block_n), dtype=torch.int32, device=x.device)
    return out, part, counters


def quant_matmul_mma(
    x: torch.Tensor,  # [num_tokens <= MMA_MAX_TOKENS, in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
    config: MmaConfig | None = None,
) -> torch.Tensor:
    """Triton tensor-core x @ W.T (+ bias) -> [num_tokens, out_features] in x's dtype."""
    check_mma_args(x, weight, bias)
    num_tokens, rows = x.shape[0], weight.out_features
    t_pad = mma_t_pad(num_tokens)
    cfg = config or mma_config(weight, num_tokens) or MmaConfig(block_n=32, num_warps=4)
    interpreted = x.device.type == "cpu"
    out, part, counters = _outputs(x, rows, cfg)
    if x.dtype == torch.float32 or interpreted:
        dot_dtype = tl.float32
    else:
        dot_dtype = tl.float16 if x.dtype == torch.float16 else tl.bfloat16
    grid = (triton.cdiv(rows, cfg.block_n), cfg.split_k)
    kernel, sub, _ = _KERNELS[weight.qtype]
    # The min term (Q4_K), the -32 offset (Q6_K) and the magic form's 128 * sum(x) need each
    # sub-block's sum of x, per token, in one reduce kernel (x.float() first added a copy per
    # call: 128 a step of an 8B); the whole-super-block form folds them into its weights.
    if cfg.words:  # the words form reads x permuted, in place of x's sums
        x_sums = words_x(x, weight.qtype, t_pad, counters if counters is not out else None)
    else:
        x_sums = x if cfg.whole else torch.sum(x.view(num_tokens, -1, sub), dim=-1, dtype=torch.float32)
    kernel[grid](
        x,
        x_sums,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        weight.in_features // 256,
        num_tokens,
        x.stride(0),
        x_sums.stride(0),
        weight.data.stride(0),
        out.stride(0),
        part,
        counters,
        T_PAD=t_pad,
        BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k,
        MAGIC=cfg.magic,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype,
        **({"WHOLE": True} if cfg.whole else {}),
        **({"WORDS": True} if cfg.words else {}),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **pdl_meta(x.device),
    )
    return out.to(x.dtype) if out.dtype != x.dtype else out
