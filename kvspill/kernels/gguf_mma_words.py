"""The words form of the tensor-core GGUF kernel (kernels/gguf_mma.py): its super-block steps,
dequantization asm and x permutation, for Q4_K and Q6_K.

A super-block's quants are read as whole words (Q4_K: 32 int32 a row, 16-byte loads pipelined
through shared memory; Q6_K, whose 210-byte rows are only 2-byte aligned: ql and qh as halfwords)
and dequantized in registers into planes (Q4_K: 8 of 32 weights, nibble h of byte b of every word;
Q6_K: 8 of 16 a half super-block) by a magic-number asm: two half-precision weights an instruction
pair, the scale and min applied there, w = q * bf16(d*sc) - bf16(dmin*m) rounded once to x's
dtype. x comes permuted to the planes' order by one small kernel a call (`words_x`, which also
zeroes gguf_mma's split-K counters), so each plane is one dot with no gather. Under Triton's
interpreter, and for fp32 x, the planes are dequantized in fp32 instead (no asm there).

Why: the sub-block form spent about 1,300 SASS instructions a super-block per thread on byte
extraction, converts and per-sub-block scaling; this one about 690 (sm_90, Triton 3.6), and the
5 Llama-3.1-8B shapes at 8 tokens ran Q4_K in 288 us against 410, Q6_K in 552 against 910 (H200,
bench/results/2026-12-03-h200-q4k-words/).
"""

from __future__ import annotations

import torch

from kvspill.kernels.fused_ops import silu_times
from kvspill.kernels.gguf_formats import QuantizedWeight, q4k_scales
from kvspill.kernels.pdl import pdl_meta, pdl_wait
from kvspill.kernels.triton_compat import tl, triton


def _fill_asm(text: str, kind: str, magic: str, one: str, minus: str) -> str:
    """An asm template for one half type: its pair type (bf16x2 / f16x2), the magic float, 1.0 and
    the constant the first fma adds, each as a pair."""
    return text.replace("TYPE", kind).replace("MAGIC", magic).replace("ONE", one).replace("MINUS", minus)


@triton.jit
def _load_or_zero(ptrs, mask):
    """tl.load(ptrs), 0 where `mask` is false; mask None: every pointer in bounds, no mask."""
    if mask is None:
        values = tl.load(ptrs)
    else:
        values = tl.load(ptrs, mask=mask, other=0)
    return values


@triton.jit
def q4k_scales_mins(base, n_ok=None):
    """(d*sc, dmin*m) [BLOCK_N, 8] fp32 of the 8 sub-blocks of the Q4_K super-blocks at `base`
    [BLOCK_N]: sub-block s's 6-bit (sc, m) are bytes s and s + 4 of scales[12] for s < 4, else
    the nibbles of byte s + 4 and the top bits of bytes s - 4 and s (ggml's get_scale_min_k4).
    n_ok: the rows to read (others give 0); None: every row of `base` is in bounds."""
    d = _load_or_zero((base + 0).to(tl.pointer_type(tl.float16)), n_ok).to(tl.float32)
    dmin = _load_or_zero((base + 2).to(tl.pointer_type(tl.float16)), n_ok).to(tl.float32)
    s = tl.arange(0, 8)[None, :]
    if n_ok is None:
        row_ok = None
    else:
        row_ok = n_ok[:, None]
    b_s = _load_or_zero(base[:, None] + 4 + s, row_ok).to(tl.int32)  # byte s
    b_s4 = _load_or_zero(base[:, None] + 8 + s, row_ok).to(tl.int32)  # byte s + 4
    b_lo = _load_or_zero(base[:, None] + 4 + (s % 4), row_ok).to(tl.int32)  # byte s - 4 (s >= 4)
    first = s < 4
    sc = tl.where(first, b_s & 63, (b_s4 & 0xF) | ((b_lo >> 6) << 4))
    m = tl.where(first, b_s4 & 63, (b_s4 >> 4) | ((b_s >> 6) << 4))
    return d[:, None] * sc.to(tl.float32), dmin[:, None] * m.to(tl.float32)


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
fma.rn.TYPE $LO, q, SCALE_LO, MIN_LO;
shr.u32 p, p, 4;
lop3.b32 q, p, 0x000F000F, MAGIC, 0xEA;
fma.rn.TYPE q, q, one, minus;
fma.rn.TYPE $HI, q, SCALE_HI, MIN_HI;"""


def _q4_words_asm(kind: str, magic: str, one: str, minus: str) -> str:
    """The asm above for one half type: its pair type, the magic float, 1.0 and -magic as pairs;
    the scales come as four half tensors ($10-$13: scale and negated min of the even, then the odd
    sub-blocks). Byte b's selector takes A's byte b into bytes 0-1 and B's into bytes 2-3."""
    body = _Q4_WORDS_PAIR
    for name, reg in zip(
        ("SCALE_LO", "MIN_LO", "SCALE_HI", "MIN_HI"), ("$10", "$11", "$12", "$13"), strict=True
    ):
        body = body.replace(name, reg)
    pairs = []
    for b in range(4):
        sel = f"0x{4 + b:x}{4 + b:x}{b:x}{b:x}"
        pairs.append(body.replace("SEL", sel).replace("$LO", f"${2 * b}").replace("$HI", f"${2 * b + 1}"))
    return _fill_asm(_Q4_WORDS_ASM.replace("PAIRS", "\n".join(pairs)), kind, magic, one, minus)


_BF16_CONSTANTS = ("bf16x2", "0x43004300", "0x3F803F80", "0xC300C300")
_F16_CONSTANTS = ("f16x2", "0x64006400", "0x3C003C00", "0xE400E400")
_Q4_WORDS_BF16 = tl.constexpr(_q4_words_asm(*_BF16_CONSTANTS))
_Q4_WORDS_F16 = tl.constexpr(_q4_words_asm(*_F16_CONSTANTS))
_Q4_WORDS_CONSTRAINTS = tl.constexpr("=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r")


@triton.jit
def _q4k_words_half(words, dsc_lo, ndm_lo, dsc_hi, ndm_hi, DOT_DTYPE: tl.constexpr):
    """The 8 (byte b, nibble h) planes of the qs `words` [BLOCK_N, 4, 8] int32 dequantized in x's
    half dtype by the asm above; scales and negated mins [BLOCK_N, 4, 1] (per group j) in fp32, or
    already in x's half type (`_unpair`)."""
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
def _unpair(pair, PAIR_DTYPE: tl.constexpr):
    """(d*sc, -dmin*m) in PAIR_DTYPE of `pack_scales` pairs (int32: scale low, -min high). The
    words asm takes them as its half scale tensors: per (row, group) two bit ops here, and the
    packing of words A's and B's equal values costs nothing, where four prmt inside the asm
    (a variant that took the int32 pairs) were 32 of the Q4_K loop's 392 SASS instructions
    (sm_90, compiled by Triton 3.9 on the dev host)."""
    scale = (pair & 0xFFFF).to(tl.int16).to(PAIR_DTYPE, bitcast=True)
    neg_min = ((pair >> 16) & 0xFFFF).to(tl.int16).to(PAIR_DTYPE, bitcast=True)
    return scale, neg_min


@triton.jit
def _q4k_plane_f32(words, dsc, dm, b: tl.constexpr, h: tl.constexpr):
    """Plane (b, h) of `words` dequantized in fp32 (x in fp32, and Triton's interpreter)."""
    return ((words >> (8 * b + 4 * h)) & 0xF).to(tl.float32) * dsc - dm


@triton.jit
def _dot_plane(acc, w, xt_ptr, plane, K: tl.constexpr, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """acc += one plane's weights [BLOCK_N, K] (any shape of BLOCK_N x K) @ its K rows of the
    permuted x^T (`words_x`; K = 32 a Q4_K plane, 16 a Q6_K one): rows plane * K ... + K - 1."""
    r = tl.arange(0, K)
    x = tl.load(xt_ptr + (plane * K + r)[:, None] * T_PAD + t[None, :])
    w2 = tl.reshape(w, (w.shape[0], K)).to(DOT_DTYPE)
    return tl.dot(w2, x.to(DOT_DTYPE), acc, input_precision="ieee")


@triton.jit
def q4k_super_block_words(
    acc,
    acc2,
    base,
    xt_ptr,
    sb,
    t,
    T_PAD: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ASM: tl.constexpr,
    TWO_ACC: tl.constexpr,
    pairs_rows=None,  # PAIR_DTYPE set: pointers to each row's `pack_scales` pairs (int32)
    PAIR_DTYPE: tl.constexpr = None,  # the pairs' half type; None: the scales from the header
):
    """acc += one Q4_K super-block of the program's rows, its qs read as 32 int32 words a row
    (16-byte loads) and cut into 8 planes: plane m = 2 b + h holds nibble h of byte b of every
    word, i.e. word w = 8 j + i gives weight 64 j + 32 h + 4 i + b (sub-block 2 j + h); x comes
    permuted to that order (`words_x`), so each plane is one K = 32 dot, no gather. With TWO_ACC
    the odd planes add into acc2 (two independent mma chains); returns (acc, acc2). Every row at
    `base` must be in bounds (the kernel reads the last row for those past the end), so no load
    is masked. With
    PAIR_DTYPE the scales come from `pack_scales` (32 bytes a row, loaded in the planes' layout)
    instead of the header's bytes, whose loads cost a third of the kernel
    (bench/results/2026-12-04-h200-mma-dequant-cost)."""
    N: tl.constexpr = base.shape[0]
    if PAIR_DTYPE is not None:
        pairs = tl.load(pairs_rows[:, None] + sb * 8 + tl.arange(0, 8)[None, :])
        pair_lo, pair_hi = tl.split(tl.reshape(pairs, (N, 4, 2)))  # [N, 4]: sub-blocks 2 j and 2 j + 1
        pair_lo, pair_hi = pair_lo[:, :, None], pair_hi[:, :, None]
        s_lo, nm_lo = _unpair(pair_lo, PAIR_DTYPE)
        s_hi, nm_hi = _unpair(pair_hi, PAIR_DTYPE)
        dsc_lo, dm_lo = s_lo.to(tl.float32), -nm_lo.to(tl.float32)
        dsc_hi, dm_hi = s_hi.to(tl.float32), -nm_hi.to(tl.float32)
    else:
        dsc, dm = q4k_scales_mins(base)
        dsc_lo, dsc_hi = tl.split(tl.reshape(dsc, (N, 4, 2)))  # [N, 4]: sub-blocks 2 j and 2 j + 1
        dm_lo, dm_hi = tl.split(tl.reshape(dm, (N, 4, 2)))
        dsc_lo, dsc_hi = dsc_lo[:, :, None], dsc_hi[:, :, None]
        dm_lo, dm_hi = dm_lo[:, :, None], dm_hi[:, :, None]
    w = tl.arange(0, 32)
    words = tl.load((base + 16).to(tl.pointer_type(tl.int32))[:, None] + w[None, :])
    words = tl.reshape(words, (N, 4, 8))
    if ASM and PAIR_DTYPE is not None:
        p0, p1, p2, p3, p4, p5, p6, p7 = _q4k_words_half(words, s_lo, nm_lo, s_hi, nm_hi, DOT_DTYPE)
    elif ASM:
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
    acc, acc2 = _dot_plane_pair(acc, acc2, p0, p1, xt_ptr, sb * 8 + 0, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, p2, p3, xt_ptr, sb * 8 + 2, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, p4, p5, xt_ptr, sb * 8 + 4, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)
    return _dot_plane_pair(acc, acc2, p6, p7, xt_ptr, sb * 8 + 6, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)


@triton.jit
def _dot_plane_pair(
    acc,
    acc2,
    w_even,
    w_odd,
    xt_ptr,
    plane,
    K: tl.constexpr,
    t,
    T_PAD: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    TWO_ACC: tl.constexpr,
):
    """Planes `plane` and `plane` + 1: the second into acc2 with TWO_ACC (two independent mma
    chains), else into acc as well."""
    acc = _dot_plane(acc, w_even, xt_ptr, plane, K, t, T_PAD, DOT_DTYPE)
    if TWO_ACC:
        acc2 = _dot_plane(acc2, w_odd, xt_ptr, plane + 1, K, t, T_PAD, DOT_DTYPE)
    else:
        acc = _dot_plane(acc, w_odd, xt_ptr, plane + 1, K, t, T_PAD, DOT_DTYPE)
    return acc, acc2


def q4k_words_x_ref(x: torch.Tensor, t_pad: int) -> torch.Tensor:
    """x [tokens, K] permuted for the words form: [K / 256, 8 planes, 32, t_pad], zero past the
    tokens; plane m = 2 b + h, row r = 8 j + i holds x's column 64 j + 32 h + 4 i + b."""
    tokens, k = x.shape
    xt = x.new_zeros((k // 256, 4, 2, 4, 8, t_pad))  # (super-block, b, h, j, i, token)
    xt[..., :tokens] = x.reshape(tokens, k // 256, 4, 2, 8, 4).permute(1, 5, 3, 2, 4, 0)
    return xt.view(k // 256, 8, 32, t_pad)


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
    return _fill_asm(text + "mov.b32 zero, 0;\n" + "\n".join(pairs) + "\n}", kind, magic, one, minus)


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
def _q6k_super_block_scales(sblk, d):
    """d * scales[8 half + 2 i + p // 8] for the 16 elements p of plane i of each half: two tuples
    (half 0, half 1) of four [N, 16] fp32. One 16-byte load of a row's scale bytes (at sblk + 192:
    gguf_dequant.block_at), cut in registers: two-byte loads a plane went through shared memory
    (22 -> 8 BAR.SYNC a loop on sm_90); 4 / 8 / 16 / 32 x 2K 1.0 / 0.7 / 1.2 / 2.5% faster a step
    (H100, bench/results/2026-12-06-h100-tiles-scale-loads)."""
    N: tl.constexpr = sblk.shape[0]
    sc = tl.load((sblk[:, None] + 192 + tl.arange(0, 16)[None, :]).to(tl.pointer_type(tl.int8)))
    sc = sc.to(tl.float32) * d[:, None]  # [N, 16]: scale 8 h + 2 i + g
    sc = tl.permute(tl.reshape(sc, (N, 2, 2, 2, 2)), (0, 4, 3, 2, 1))  # [N, g, i_lo, i_hi, h]
    h0, h1 = tl.split(sc)  # [N, g, i_lo, i_hi]
    a00, a01 = tl.split(h0)  # i_hi
    b00, b01 = tl.split(a00)  # i_lo: h0 i0 [N, g], h0 i1
    b02, b03 = tl.split(a01)  # h0 i2, h0 i3
    a10, a11 = tl.split(h1)
    b10, b11 = tl.split(a10)
    b12, b13 = tl.split(a11)
    return (
        (_q6k_expand(b00), _q6k_expand(b01), _q6k_expand(b02), _q6k_expand(b03)),
        (_q6k_expand(b10), _q6k_expand(b11), _q6k_expand(b12), _q6k_expand(b13)),
    )


@triton.jit
def _q6k_expand(pair):
    """[N, 2] (the two groups of a plane's 32 weights) -> [N, 16], p < 8 group 0."""
    N: tl.constexpr = pair.shape[0]
    return tl.reshape(tl.broadcast_to(pair[:, :, None], (N, 2, 8)), (N, 16))


@triton.jit
def _q6k_half_words(
    acc,
    acc2,
    base,
    scales,
    xt_ptr,
    sb,
    half: tl.constexpr,
    t,
    T_PAD: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ASM: tl.constexpr,
    TWO_ACC: tl.constexpr,
):
    """acc += half `half` of one Q6_K super-block: ql and qh read as halfwords [BLOCK_N, 16] (in
    gguf's layout the rows are only 2-byte aligned; in the split one the quants are 16-byte aligned
    and Triton loads them in 16-byte words), cut into 8 planes (i, e) of 16 weights 128 half + 32 i + 2 p + e,
    each one K = 16 dot against its rows of the permuted x (`words_x`)."""
    p = tl.arange(0, 16)[None, :]
    row = base[:, None]
    ql_a = tl.load((row + 64 * half).to(tl.pointer_type(tl.int16)) + p)
    ql_b = tl.load((row + 64 * half + 32).to(tl.pointer_type(tl.int16)) + p)
    qh = tl.load((row + 128 + 32 * half).to(tl.pointer_type(tl.int16)) + p)
    s0, s1, s2, s3 = scales
    if ASM:
        w0, w1, w2, w3, w4, w5, w6, w7 = _q6k_words_half(ql_a, ql_b, qh, s0, s1, s2, s3, DOT_DTYPE)
    else:
        w0, w1 = _q6k_plane_f32(ql_a, qh, s0, 0, 0), _q6k_plane_f32(ql_a, qh, s0, 0, 1)
        w2, w3 = _q6k_plane_f32(ql_b, qh, s1, 1, 0), _q6k_plane_f32(ql_b, qh, s1, 1, 1)
        w4, w5 = _q6k_plane_f32(ql_a, qh, s2, 2, 0), _q6k_plane_f32(ql_a, qh, s2, 2, 1)
        w6, w7 = _q6k_plane_f32(ql_b, qh, s3, 3, 0), _q6k_plane_f32(ql_b, qh, s3, 3, 1)
    first = sb * 16 + half * 8  # plane index of (half, 0, 0) in x's [super-block, 16 planes] rows
    acc, acc2 = _dot_plane_pair(acc, acc2, w0, w1, xt_ptr, first + 0, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, w2, w3, xt_ptr, first + 2, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, w4, w5, xt_ptr, first + 4, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)
    return _dot_plane_pair(acc, acc2, w6, w7, xt_ptr, first + 6, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)


@triton.jit
def q6k_super_block_words(
    acc,
    acc2,
    base,
    sblk,
    xt_ptr,
    sb,
    t,
    T_PAD: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    TWO_ACC: tl.constexpr,
):
    """acc += one Q6_K super-block of the program's rows in the words form (both halves); with
    TWO_ACC the odd planes go to acc2. Returns (acc, acc2). Each row's quants (ql, qh) of this
    super-block at `base`, its scales and d at `sblk` + 192 and + 208 (gguf_dequant.block_at). Every
    row must be in bounds (as in `q4k_super_block_words`): no load is masked."""
    d = tl.load((sblk + 208).to(tl.pointer_type(tl.float16))).to(tl.float32)
    scales0, scales1 = _q6k_super_block_scales(sblk, d)
    ASM: tl.constexpr = DOT_DTYPE != tl.float32
    acc, acc2 = _q6k_half_words(acc, acc2, base, scales0, xt_ptr, sb, 0, t, T_PAD, DOT_DTYPE, ASM, TWO_ACC)
    acc, acc2 = _q6k_half_words(acc, acc2, base, scales1, xt_ptr, sb, 1, t, T_PAD, DOT_DTYPE, ASM, TWO_ACC)
    return acc, acc2


def q6k_words_x_ref(x: torch.Tensor, t_pad: int) -> torch.Tensor:
    """x [tokens, K] permuted for the Q6_K words form: [K / 256 * 16 planes, 16, t_pad], zero past
    the tokens; plane (half, i, e), row p holds x's column 128 half + 32 i + 2 p + e."""
    tokens, k = x.shape
    xt = x.new_zeros((k // 256, 2, 4, 2, 16, t_pad))  # (super-block, half, i, e, p, token)
    xt[..., :tokens] = x.reshape(tokens, k // 256, 2, 4, 16, 2).permute(1, 2, 3, 5, 4, 0)
    return xt.view(k // 256 * 16, 16, t_pad)


@triton.jit
def _words_x_kernel(
    x_ptr,
    xt_ptr,
    counter_ptr,
    num_counters,
    num_tokens,
    stride_x,
    Q6K: tl.constexpr,
    T_PAD: tl.constexpr,
    ROWS: tl.constexpr,
    PDL: tl.constexpr,
    GATED: tl.constexpr = False,
):
    """Program (sb, part): rows [part * ROWS, (part + 1) * ROWS) of super-block sb's [256, T_PAD]
    slab of `q4k_words_x_ref` (rows (m, r)) or `q6k_words_x_ref` (rows (half, i, e, p)), in one
    pass; zeroes its share of the counters. GATED: x holds [gate, up] (K columns each) and the slab
    is of silu(gate) * up, rounded as kernels/fused_ops' SiLU kernel rounds it (the same values:
    the MLP's down projection)."""
    pdl_wait(PDL)
    sb = tl.program_id(0)
    c = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    if Q6K:
        half, i, e, p = c // 128, (c // 32) % 4, (c // 16) % 2, c % 16
        col = sb * 256 + 128 * half + 32 * i + 2 * p + e
    else:
        b, h, j, i = c // 64, (c // 32) % 2, (c % 32) // 8, c % 8
        col = sb * 256 + 64 * j + 32 * h + 4 * i + b
    t = tl.arange(0, T_PAD)
    x_at = x_ptr + t[None, :] * stride_x + col[:, None]
    x = tl.load(x_at, mask=(t < num_tokens)[None, :], other=0.0)
    if GATED:  # padded tokens: silu(0) * 0 = 0, as words_x's zeros
        up = tl.load(x_at + tl.num_programs(0) * 256, mask=(t < num_tokens)[None, :], other=0.0)
        x = silu_times(x, up, xt_ptr.dtype.element_ty)
    tl.store(xt_ptr + (sb * 256 + c)[:, None] * T_PAD + t[None, :], x)
    _zero_counters(counter_ptr, num_counters)


@triton.jit
def _zero_counters(counter_ptr, num_counters):
    """This program's share of the split-K arrival counters set to 0 (gguf_mma's `_store`, split K in order)."""
    programs = tl.num_programs(0) * tl.num_programs(1)
    per = tl.cdiv(num_counters, programs)
    first = (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * per
    for start in range(first, first + per, 256):
        c = start + tl.arange(0, 256)
        tl.store(
            counter_ptr + c, tl.zeros([256], dtype=tl.int32), mask=(c < first + per) & (c < num_counters)
        )


WORDS_X_PROGRAMS = 128  # programs a words_x launch aims for (a super-block's rows split to reach it)
WORDS_X_MIN_VALUES = 1024  # values a program keeps at least (fewer: launch cost without the parallel reads)


def words_x_split(k: int, t_pad: int) -> tuple[int, int]:
    """(rows of a super-block a program permutes, warps) for x [tokens, k] padded to t_pad: at 16
    super-blocks (K 4096) one program a super-block left 16 programs of 2-8K values each, and a
    32-token call took 2.4 us against 1.4 at 8 tokens (bench/results/2026-12-07-peer-build/, call 3).
    Split: 8 / 32 x 2K steps 0.3 / 0.7% shorter on an H100 (bench/results/2026-12-07-words-x-split/);
    both constants are untuned guesses (the sweep there has not run)."""
    rows = 256
    while (
        rows > 16 and k // 256 * (256 // rows) < WORDS_X_PROGRAMS and rows // 2 * t_pad >= WORDS_X_MIN_VALUES
    ):
        rows //= 2
    return rows, 4 if rows * t_pad >= 2048 else 2


def words_x(
    x: torch.Tensor, qtype: str, t_pad: int, counters: torch.Tensor | None = None, gated: bool = False
) -> torch.Tensor:
    """x permuted for `qtype`'s words form (`q4k_words_x_ref`, `q6k_words_x_ref`) in one kernel
    launch (a PDL launch where the card has it), which also zeroes `counters` (int32). `gated`: x
    is [tokens, 2 K], gate then up, and the permuted values are `silu_and_mul(x)`'s (one launch
    for the SiLU and the permutation)."""
    tokens, k = x.shape[0], x.shape[1] // 2 if gated else x.shape[1]
    shape = (k // 256, 8, 32, t_pad) if qtype == "Q4_K" else (k // 256 * 16, 16, t_pad)
    xt = torch.empty(shape, dtype=x.dtype, device=x.device)
    zeroed = counters if counters is not None else xt  # num_counters 0: never written
    num_counters = 0 if counters is None else counters.numel()
    rows, warps = words_x_split(k, t_pad)
    _words_x_kernel[(k // 256, 256 // rows)](
        x,
        xt,
        zeroed,
        num_counters,
        tokens,
        x.stride(0),
        Q6K=qtype == "Q6_K",
        T_PAD=t_pad,
        ROWS=rows,
        GATED=gated,
        num_warps=warps,
        **pdl_meta(x.device),
    )
    return xt


def pack_scales(weight: QuantizedWeight, dtype: torch.dtype) -> torch.Tensor:
    """A Q4_K weight's scale pairs for the words form: [rows, K / 16] of `dtype` (bf16 / fp16),
    per sub-block of 32 (in K order) d*sc then -dmin*m, each rounded once to `dtype` as the asm
    rounds them; viewed as int32 [rows, K / 32], d*sc is the low half. Computed once at load
    (model/quant.attach_scale_pairs), a few thousand rows at a time: 32 bytes a super-block
    beside its 144."""
    assert weight.qtype == "Q4_K", f"scale pairs are for Q4_K weights, not {weight.qtype}"
    assert dtype in (torch.bfloat16, torch.float16), f"scale pairs are bf16 or fp16, not {dtype}"
    rows, k = weight.out_features, weight.in_features
    pairs = torch.empty((rows, k // 32, 2), dtype=dtype, device=weight.device)
    for start in range(0, rows, _PACK_ROWS):
        scale, offset = q4k_scales(weight.data[start : start + _PACK_ROWS], k)
        pairs[start : start + _PACK_ROWS, :, 0] = scale
        pairs[start : start + _PACK_ROWS, :, 1] = -offset
    return pairs.view(rows, k // 16)


_PACK_ROWS = 4096  # rows of a weight whose scales are computed at once (transient fp32 tensors)
