"""The lane GEMV kernels for Q4_K and Q6_K (kernels/gguf_gemv.py dispatches to them).

One warp a program; each lane owns one piece of the K chunk for all BLOCK_N rows and all tokens
of the program, in registers: x is loaded and converted once per lane for all rows, each weight
once for all tokens, nothing crosses lanes until after the K loop. Weights become floats in
inline PTX without int-to-float converts (`USE_ASM`); under Triton's interpreter each PTX helper
has a plain-Triton twin. Every packed PTX helper is elementwise per packed position, so results
do not depend on the register layout Triton picks; misaligned words load one word per element.
gguf_gemv.py's docstring has the design and the measured GB/s.
"""

from __future__ import annotations

from kvspill.kernels.gguf_dequant import block_at
from kvspill.kernels.pdl import LANE_PREFETCH_LINES, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton


@triton.jit
def _magic_f32(v, bit: tl.constexpr):
    """float(field) for the integer field of `v` at bits [bit, 23) (all other bits zero): OR-ing
    in the exponent of 2**(23 - bit) makes the float 2**(23 - bit) + field exactly, so one
    subtract finishes the conversion (no int-to-float convert, which runs at a quarter rate)."""
    return (v | ((150 - bit) << 23)).to(tl.float32, bitcast=True) - (2.0 ** (23 - bit))


@triton.jit
def _f16_bits(v):
    """The fp16 number in the low 16 bits of int32 `v` (higher bits zero) as float32."""
    return v.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _nibbles(b, USE_ASM: tl.constexpr):
    """uint8 tensor -> (low nibbles, high nibbles) as exact float32. On the GPU one PTX block
    turns 4 packed bytes into 8 floats with 9 integer and 8 float instructions: each nibble is
    masked in place and OR-ed with the exponent that makes its float 2**E + nibble (bits
    [p, p + 4) with E = 23 - p, p <= 16; the top three nibbles come from the word shifted right
    by 12), then 2**E is subtracted. Output i reads only byte i: any register layout works."""
    if USE_ASM:
        lo, hi = tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t;
            shr.b32 t, $8, 12;
            lop3.b32 $0, $8, 0x0000000F, 0x4B000000, 0xEA;
            lop3.b32 $1, $8, 0x00000F00, 0x47000000, 0xEA;
            lop3.b32 $2, $8, 0x000F0000, 0x43000000, 0xEA;
            lop3.b32 $3, t, 0x0000F000, 0x45000000, 0xEA;
            lop3.b32 $4, $8, 0x000000F0, 0x49000000, 0xEA;
            lop3.b32 $5, $8, 0x0000F000, 0x45000000, 0xEA;
            lop3.b32 $6, t, 0x00000F00, 0x47000000, 0xEA;
            lop3.b32 $7, t, 0x000F0000, 0x43000000, 0xEA;
            sub.f32 $0, $0, 0f4B000000;
            sub.f32 $1, $1, 0f47000000;
            sub.f32 $2, $2, 0f43000000;
            sub.f32 $3, $3, 0f45000000;
            sub.f32 $4, $4, 0f49000000;
            sub.f32 $5, $5, 0f45000000;
            sub.f32 $6, $6, 0f47000000;
            sub.f32 $7, $7, 0f43000000;
            }""",
            constraints="=r,=r,=r,=r,=r,=r,=r,=r,r",
            args=[b],
            dtype=(tl.int32, tl.int32),
            is_pure=True,
            pack=4,
        )
        return lo.to(tl.float32, bitcast=True), hi.to(tl.float32, bitcast=True)
    else:
        v = b.to(tl.int32)
        return _magic_f32(v & 0xF, 0), _magic_f32(v >> 4, 0)


@triton.jit
def _to_f32(v, USE_ASM: tl.constexpr):
    """x values as float32; on the GPU bf16 pairs take one shift or one AND each (the
    compiler's conversion spends two on the high half). Elementwise per packed position."""
    if USE_ASM and v.dtype == tl.bfloat16:
        f = tl.inline_asm_elementwise(
            asm="{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xFFFF0000; }",
            constraints="=r,=r,r",
            args=[v],
            dtype=tl.int32,
            is_pure=True,
            pack=2,
        )
        return f.to(tl.float32, bitcast=True)
    else:
        return v.to(tl.float32)


@triton.jit
def q4k_gemv_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_x,
    stride_w,
    stride_o,
    NUM_TOKENS,  # a runtime value: one compile serves every token count (issue 55)
    T_PAD: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    SB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    X_ASM: tl.constexpr,
    DEQUANT: tl.constexpr,
    PDL: tl.constexpr = False,
):
    # Q4_K, 1..T_PAD tokens, CUDA-core FMAs. Grid: (cdiv(rows, BLOCK_N),). The lanes' work items:
    # _q4k_weight_lanes. Per sub-block: sum_l (sc * q_l - m) * x_l = sc * sum_l q_l x_l - m * sum_l x_l.
    KL: tl.constexpr = 4 * SB
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    row, b_off, h_off, sb_w, row_ok, sh, low = _q4k_weight_lanes(w_ptr, pid, rows, stride_w, BLOCK_N, KL)
    x_off, sb_x, tok_ok = _q4k_token_lanes(stride_x, NUM_TOKENS, T_PAD, KL)
    acc = tl.zeros((T_PAD, BLOCK_N, KL, 1), dtype=tl.float32)
    acc8 = tl.zeros((T_PAD, BLOCK_N, KL, 8), dtype=tl.float32)
    for k in range(0, num_blocks, SB):
        w_ok = row_ok & ((k + sb_w) < num_blocks)  # [BLOCK_N * KL, 1]
        x_ok = tok_ok & ((k + sb_x) < num_blocks)
        wk = row + k * 144
        sc_lo, sc_hi, mn_lo, mn_hi = _q4k_scales(wk + h_off, w_ok, sh, low, BLOCK_N, KL)
        xk = x_ptr + k * 256 + x_off
        if DEQUANT:
            # Several tokens: dequantize each weight once (sc * q - m), then one FMA per token.
            for l1 in tl.static_range(4):
                q_lo, q_hi, x_lo, x_hi = _q4k_step(wk + b_off, w_ok, xk, x_ok, l1, USE_ASM, X_ASM)
                q_lo = tl.reshape(q_lo, (1, BLOCK_N, KL, 8))
                q_hi = tl.reshape(q_hi, (1, BLOCK_N, KL, 8))
                acc8 += (sc_lo * q_lo - mn_lo) * tl.reshape(x_lo, (T_PAD, 1, KL, 8))
                acc8 += (sc_hi * q_hi - mn_hi) * tl.reshape(x_hi, (T_PAD, 1, KL, 8))
        else:
            s_lo, s_hi, x_lo_sum, x_hi_sum = _q4k_partial_sums(
                wk + b_off, w_ok, xk, x_ok, T_PAD, BLOCK_N, KL, USE_ASM, X_ASM
            )
            acc += sc_lo * tl.sum(s_lo, axis=3, keep_dims=True) + sc_hi * tl.sum(s_hi, axis=3, keep_dims=True)
            acc -= mn_lo * tl.sum(x_lo_sum, axis=3, keep_dims=True) + mn_hi * tl.sum(
                x_hi_sum, axis=3, keep_dims=True
            )
    if DEQUANT:
        acc += tl.sum(acc8, axis=3, keep_dims=True)
    out = tl.sum(tl.sum(acc, axis=3), axis=2)  # [T_PAD, BLOCK_N]
    _store_lane_sums(out_ptr, bias_ptr, out, pid, rows, stride_o, NUM_TOKENS, T_PAD, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def _q4k_weight_lanes(w_ptr, pid, rows, stride_w, BLOCK_N: tl.constexpr, KL: tl.constexpr):
    """Where each lane reads its weights, per element r * KL + kl of [BLOCK_N * KL, 1]: work item
    kl = (super-block sb, 32-byte group g) of the K chunk, KL = 4 * SB of them; with one warp
    and KL = 32 each lane owns one, for all BLOCK_N rows. Group g of a super-block is
    qs[32 g : 32 g + 32]: its low nibbles are sub-block 2 g (x[64 g + l]), its high nibbles
    sub-block 2 g + 1 (x[64 g + 32 + l]); b_off [BLOCK_N * KL, 8] takes 8 bytes at a time. Loads
    are 2-D tiles [rows * KL, 8] (row-major, one lane dimension), reshaped to [T, BLOCK_N, KL, 8]
    later: the lane mapping does not depend on how a Triton version orders the dimensions of a
    >2-D tile. Returns (row, b_off, h_off, sb_w, row_ok, sh, low): sh and low pick the 6-bit
    scales of group g (_q4k_scales)."""
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]  # r * KL + kl
    l0 = tl.arange(0, 8)[None, :]
    n = pid * BLOCK_N + i_w // KL
    row = w_ptr + n.to(tl.int64) * stride_w  # [BLOCK_N * KL, 1]
    sb_w = (i_w % KL) // 4
    b_off = sb_w * 144 + 16 + ((i_w % KL) % 4) * 32 + l0  # [BLOCK_N * KL, 8]
    h_off = sb_w * 144  # [BLOCK_N * KL, 1]
    row_ok = n < rows
    g_w = (i_w % KL) % 4
    sh = 16 * (g_w % 2)
    low = g_w < 2
    return row, b_off, h_off, sb_w, row_ok, sh, low


@triton.jit
def _q4k_token_lanes(stride_x, NUM_TOKENS, T_PAD: tl.constexpr, KL: tl.constexpr):
    """Where each lane reads x, per element t * KL + kl of [T_PAD * KL, 1]: the 64 x values of
    its group, 8 at a time. Returns (x_off [T_PAD * KL, 8], sb_x, tok_ok)."""
    i_x = tl.arange(0, T_PAD * KL)[:, None]  # t * KL + kl
    l0 = tl.arange(0, 8)[None, :]
    sb_x = (i_x % KL) // 4
    x_off = (i_x // KL) * stride_x + sb_x * 256 + ((i_x % KL) % 4) * 64 + l0  # [T_PAD * KL, 8]
    tok_ok = (i_x // KL) < NUM_TOKENS
    return x_off, sb_x, tok_ok


@triton.jit
def _q4k_scales(hdr_bytes, w_ok, sh, low, BLOCK_N: tl.constexpr, KL: tl.constexpr):
    """The super-block header at `hdr_bytes` (d, dmin, 12 bytes of packed scales) -> the factors
    (sc_lo, sc_hi, mn_lo, mn_hi), each [1, BLOCK_N, KL, 1], of the lane's sub-blocks 2 g, 2 g + 1
    (_q4k_decode)."""
    hdr = hdr_bytes.to(tl.pointer_type(tl.int32))
    h0 = tl.load(hdr, mask=w_ok, other=0)
    h1 = tl.load(hdr + 1, mask=w_ok, other=0)
    h2 = tl.load(hdr + 2, mask=w_ok, other=0)
    h3 = tl.load(hdr + 3, mask=w_ok, other=0)
    sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, sh, low)
    shape: tl.constexpr = (1, BLOCK_N, KL, 1)
    return (
        tl.reshape(sc_lo, shape),
        tl.reshape(sc_hi, shape),
        tl.reshape(mn_lo, shape),
        tl.reshape(mn_hi, shape),
    )


@triton.jit
def _q4k_decode(h0, h1, h2, h3, sh, low):
    """A Q4_K super-block header as 4 words (h0 = d | dmin << 16; h1, h2, h3 = scales[0:4], [4:8],
    [8:12]) -> (d * sc, d * sc', dmin * m, dmin * m') of sub-blocks 2 g and 2 g + 1 of the lane's
    group g (sh = 16 * (g % 2), low = g < 2). Their 6-bit (scale, min) are bytes 2 g % 4, + 1 of
    the packed words: g < 2 reads sc from scales[0:4] and m from [4:8]; g >= 2 combines 4 bits of
    scales[8:12] (sc low, m high nibble) with the top 2 bits of scales[0:4] / [4:8]."""
    h1 = h1 >> sh
    h2 = h2 >> sh
    h3 = h3 >> sh
    sc = tl.where(low, h1 & 0x3F3F, (h3 & 0x0F0F) | ((h1 >> 2) & 0x3030))
    mn = tl.where(low, h2 & 0x3F3F, ((h3 >> 4) & 0x0F0F) | ((h2 >> 2) & 0x3030))
    d = _f16_bits(h0 & 0xFFFF)
    dmin = _f16_bits((h0 >> 16) & 0xFFFF)
    sc_lo = d * _magic_f32(sc & 0xFF, 0)
    sc_hi = d * _magic_f32(sc & 0xFF00, 8)
    mn_lo = dmin * _magic_f32(mn & 0xFF, 0)
    mn_hi = dmin * _magic_f32(mn & 0xFF00, 8)
    return sc_lo, sc_hi, mn_lo, mn_hi


@triton.jit
def _q4k_step(w_bytes, w_ok, xk, x_ok, l1: tl.constexpr, USE_ASM: tl.constexpr, X_ASM: tl.constexpr):
    """Step l1 of 4 over the lane's group: 8 quant bytes -> (q_lo, q_hi) [BLOCK_N * KL, 8] (their
    low and high nibbles), and the x values they multiply -> (x_lo, x_hi) [T_PAD * KL, 8]."""
    q_lo, q_hi = _nibbles(tl.load(w_bytes + 8 * l1, mask=w_ok, other=0), USE_ASM)
    x_lo = _to_f32(tl.load(xk + 8 * l1, mask=x_ok, other=0.0), X_ASM)
    x_hi = _to_f32(tl.load(xk + 32 + 8 * l1, mask=x_ok, other=0.0), X_ASM)
    return q_lo, q_hi, x_lo, x_hi


@triton.jit
def _q4k_partial_sums(
    w_bytes,
    w_ok,
    xk,
    x_ok,
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    USE_ASM: tl.constexpr,
    X_ASM: tl.constexpr,
):
    """One token or few: elementwise partial sums over the 4 steps (chains of FMAs) of q * x
    (s_lo, s_hi [T_PAD, BLOCK_N, KL, 8]) and of x (x_lo_sum, x_hi_sum [T_PAD, 1, KL, 8]); the
    caller reduces them over the last axis once and applies the scales and mins."""
    s_lo = tl.zeros((T_PAD, BLOCK_N, KL, 8), dtype=tl.float32)
    s_hi = tl.zeros((T_PAD, BLOCK_N, KL, 8), dtype=tl.float32)
    x_lo_sum = tl.zeros((T_PAD, 1, KL, 8), dtype=tl.float32)
    x_hi_sum = tl.zeros((T_PAD, 1, KL, 8), dtype=tl.float32)
    for l1 in tl.static_range(4):
        q_lo, q_hi, x_lo, x_hi = _q4k_step(w_bytes, w_ok, xk, x_ok, l1, USE_ASM, X_ASM)
        x_lo = tl.reshape(x_lo, (T_PAD, 1, KL, 8))
        x_hi = tl.reshape(x_hi, (T_PAD, 1, KL, 8))
        s_lo += tl.reshape(q_lo, (1, BLOCK_N, KL, 8)) * x_lo
        s_hi += tl.reshape(q_hi, (1, BLOCK_N, KL, 8)) * x_hi
        x_lo_sum += x_lo
        x_hi_sum += x_hi
    return s_lo, s_hi, x_lo_sum, x_hi_sum


@triton.jit
def _store_lane_sums(
    out_ptr,
    bias_ptr,
    out,
    pid,
    rows,
    stride_o,
    NUM_TOKENS,  # a runtime value: one compile serves every token count (issue 55)
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
):
    """out [T_PAD, BLOCK_N] (+ bias) into the program's rows of the real tokens."""
    t_out = tl.arange(0, T_PAD)[:, None]
    n_out = pid * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if HAS_LINEAR_BIAS:
        out += tl.load(bias_ptr + n_out, mask=n_out < rows, other=0.0).to(tl.float32)
    out_mask = (t_out < NUM_TOKENS) & (n_out < rows)
    tl.store(out_ptr + t_out * stride_o + n_out, out.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _load_word_2b(ptr, USE_ASM: tl.constexpr):
    """The little-endian 32-bit word at byte pointer `ptr` (2-byte aligned; any tensor shape) as
    int32: Triton vectorizes a load only as far as it can prove alignment (here 2 bytes). On the
    GPU one 4-byte load (address = 0 mod 4) or two 2-byte loads and a PRMT (= 2 mod 4), one word
    per element, so the result does not depend on the register layout. No mask: callers pass
    in-bounds pointers."""
    if USE_ASM:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t0, t1, lo;
            .reg .pred odd;
            cvt.u32.u64 lo, $1;
            and.b32 lo, lo, 2;
            setp.ne.u32 odd, lo, 0;
            @!odd ld.global.b32 $0, [$1];
            @odd ld.global.u16 t0, [$1];
            @odd ld.global.u16 t1, [$1+2];
            @odd prmt.b32 $0, t0, t1, 0x5410;
            }""",
            constraints="=r,l",
            args=[ptr],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        w = tl.load(ptr).to(tl.int32) | (tl.load(ptr + 1).to(tl.int32) << 8)
        return w | (tl.load(ptr + 2).to(tl.int32) << 16) | (tl.load(ptr + 3).to(tl.int32) << 24)


@triton.jit
def _bytes_minus_32(u, USE_ASM: tl.constexpr):
    """int32 word of 4 bytes (each < 128) -> the 4 values byte_i - 32 as exact float32 (4
    tensors of u's shape). On the GPU one PRMT builds the float 2**23 + byte, one subtract."""
    if USE_ASM:
        b0, b1, b2, b3 = tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 m;
            mov.b32 m, 0x4B000000;
            prmt.b32 $0, $4, m, 0x7650;
            prmt.b32 $1, $4, m, 0x7651;
            prmt.b32 $2, $4, m, 0x7652;
            prmt.b32 $3, $4, m, 0x7653;
            sub.f32 $0, $0, 0f4B000020;
            sub.f32 $1, $1, 0f4B000020;
            sub.f32 $2, $2, 0f4B000020;
            sub.f32 $3, $3, 0f4B000020;
            }""",
            constraints="=r,=r,=r,=r,r",
            args=[u],
            dtype=(tl.int32, tl.int32, tl.int32, tl.int32),
            is_pure=True,
            pack=1,
        )
        b0 = b0.to(tl.float32, bitcast=True)
        b1 = b1.to(tl.float32, bitcast=True)
        b2 = b2.to(tl.float32, bitcast=True)
        b3 = b3.to(tl.float32, bitcast=True)
    else:
        b0 = _magic_f32(u & 0xFF, 0) - 32.0
        b1 = _magic_f32((u >> 8) & 0xFF, 0) - 32.0
        b2 = _magic_f32((u >> 16) & 0xFF, 0) - 32.0
        b3 = _magic_f32((u >> 24) & 0xFF, 0) - 32.0
    return b0, b1, b2, b3


@triton.jit
def _split4(v):
    """[N, 4] -> its 4 columns, each [N, 1] (register moves when, as loaded, a thread holds all 4)."""
    a, b = tl.split(tl.reshape(v, (v.shape[0], 2, 2)))  # columns (0, 2), (1, 3)
    c0, c2 = tl.split(a)
    c1, c3 = tl.split(b)
    return c0[:, None], c1[:, None], c2[:, None], c3[:, None]


@triton.jit
def load_q6k_word(ptr, SPLIT: tl.constexpr, USE_ASM: tl.constexpr):
    """A quant word of a Q6_K block: 4-byte aligned in the split layout (one plain load), 2-byte
    aligned in gguf's (`_load_word_2b`)."""
    if SPLIT:
        word = tl.load(ptr.to(tl.pointer_type(tl.int32)))
    else:
        word = _load_word_2b(ptr, USE_ASM)
    return word


@triton.jit
def q6k_gemv_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_x,
    stride_w,
    stride_o,
    NUM_TOKENS,  # a runtime value: one compile serves every token count (issue 55)
    T_PAD: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    NSUB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_ASM: tl.constexpr,
    X_ASM: tl.constexpr,
    DEQUANT: tl.constexpr,
    PDL: tl.constexpr = False,
    SPLIT: tl.constexpr = False,  # the rows in the split layout (gguf_dequant.block_at)
):
    # Q6_K, 1..T_PAD tokens, as q4k_gemv_kernel; the lanes' work items: _q6k_weight_lanes. A warp's
    # loads of one kind cover 32 contiguous bytes of each (block, half). NSUB pairs of blocks a loop step.
    KL: tl.constexpr = 32
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    row_off, sb_w, ql_off, qh_off, sc_off = _q6k_weight_lanes(pid, rows, stride_w, BLOCK_N, KL)
    x_off, sb_x, tok_ok = _q6k_token_lanes(stride_x, NUM_TOKENS, T_PAD, KL)
    acc = tl.zeros((T_PAD, BLOCK_N, KL, 1), dtype=tl.float32)
    for k in range(0, num_blocks, 2 * NSUB):
        for j in tl.static_range(NSUB):
            kj = k + 2 * j
            # Blocks past the end read block 0 of the row and meet x = 0.
            kb_ok = (kj + sb_w) < num_blocks
            x_ok = tok_ok & ((kj + sb_x) < num_blocks)
            blk, sblk = block_at(w_ptr + row_off, tl.where(kb_ok, kj + sb_w, 0), num_blocks, 210, SPLIT)
            ql_a = load_q6k_word(blk + ql_off, SPLIT, USE_ASM)
            ql_b = load_q6k_word(blk + ql_off + 32, SPLIT, USE_ASM)
            qh = load_q6k_word(blk + qh_off, SPLIT, USE_ASM)
            d = (
                tl.load((sblk + 208).to(tl.pointer_type(tl.uint16)))
                .to(tl.float16, bitcast=True)
                .to(tl.float32)
            )
            xk = x_ptr + kj * 256 + x_off
            for Q in tl.static_range(4):
                q0, q1, q2, q3 = _q6k_quants(ql_a, ql_b, qh, Q, USE_ASM)
                sc = d * tl.load((sblk + sc_off + 2 * Q).to(tl.pointer_type(tl.int8))).to(tl.float32)
                x0, x1, x2, x3 = _split4(_to_f32(tl.load(xk + 32 * Q, mask=x_ok, other=0.0), X_ASM))
                sc = tl.reshape(sc, (1, BLOCK_N, KL, 1))
                acc = _q6k_fma(acc, sc, q0, q1, q2, q3, x0, x1, x2, x3, T_PAD, BLOCK_N, KL, DEQUANT)
    out = tl.sum(tl.sum(acc, axis=3), axis=2)  # [T_PAD, BLOCK_N]
    _store_lane_sums(out_ptr, bias_ptr, out, pid, rows, stride_o, NUM_TOKENS, T_PAD, BLOCK_N, HAS_LINEAR_BIAS)


@triton.jit
def _q6k_weight_lanes(pid, rows, stride_w, BLOCK_N: tl.constexpr, KL: tl.constexpr):
    """Where each lane reads its weights, per element r * KL + kl of [BLOCK_N * KL, 1]: KL work
    items kl = (block sb of KL // 16, half h, 4-element column group lam of 8), one per lane. Item
    (sb, h, lam) takes l = 4 lam .. 4 lam + 3 of half h: the words ql[64 h + l],
    ql[64 h + 32 + l] and qh[32 h + l] (blocks are 210 bytes, so 2-byte aligned: _load_word_2b),
    giving elements 128 h + 32 Q + l (Q = 0..3) with scales sc[8 h + 2 Q + l // 16]. Returns
    (row_off, sb_w, ql_off, qh_off, sc_off), offsets within the block but row_off."""
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]  # r * KL + kl
    n = pid * BLOCK_N + i_w // KL
    row_ok = n < rows
    # Rows past the end read row 0 (their sums are not stored), so the loads need no mask.
    row_off = tl.where(row_ok, n, 0).to(tl.int64) * stride_w  # [BLOCK_N * KL, 1]
    kl_w = i_w % KL
    sb_w = kl_w // 16
    ql_off = ((kl_w // 8) % 2) * 64 + (kl_w % 8) * 4
    qh_off = 128 + ((kl_w // 8) % 2) * 32 + (kl_w % 8) * 4
    sc_off = 192 + ((kl_w // 8) % 2) * 8 + (kl_w % 8) // 4  # + 2 Q
    return row_off, sb_w, ql_off, qh_off, sc_off


@triton.jit
def _q6k_token_lanes(stride_x, NUM_TOKENS, T_PAD: tl.constexpr, KL: tl.constexpr):
    """Where each lane reads x, per element t * KL + kl of [T_PAD * KL, 1]: its 4 columns of
    quarter 0 (quarter Q adds 32 Q). Returns (x_off [T_PAD * KL, 4], sb_x, tok_ok)."""
    i_x = tl.arange(0, T_PAD * KL)[:, None]  # t * KL + kl
    kl_x = i_x % KL
    sb_x = kl_x // 16
    x_off = (
        (i_x // KL) * stride_x
        + sb_x * 256
        + ((kl_x // 8) % 2) * 128
        + (kl_x % 8) * 4
        + tl.arange(0, 4)[None, :]
    )
    tok_ok = (i_x // KL) < NUM_TOKENS
    return x_off, sb_x, tok_ok


@triton.jit
def _q6k_quants(ql_a, ql_b, qh, Q: tl.constexpr, USE_ASM: tl.constexpr):
    """The 6-bit quants of quarter Q minus 32, 4 bytes at a time, as 4 float32 tensors."""
    return _bytes_minus_32(q6k_quant_bytes(ql_a, ql_b, qh, Q), USE_ASM)


@triton.jit
def q6k_quant_bytes(ql_a, ql_b, qh, Q: tl.constexpr):
    """The 6-bit quants (0..63) of quarter Q, one a byte of an int32 word: 4 bits of ql (low
    nibbles for Q < 2), 2 bits of qh (bits 2 Q, 2 Q + 1 of each byte) on top."""
    lo = ql_a if Q % 2 == 0 else ql_b
    if Q >= 2:
        lo = lo >> 4
    if Q == 3:
        hi = qh >> 2
    else:
        hi = qh << (4 - 2 * Q)
    return (lo & 0x0F0F0F0F) | (hi & 0x30303030)


@triton.jit
def _q6k_fma(
    acc,
    sc,
    q0,
    q1,
    q2,
    q3,
    x0,
    x1,
    x2,
    x3,
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KL: tl.constexpr,
    DEQUANT: tl.constexpr,
):
    """acc [T_PAD, BLOCK_N, KL, 1] += sc * sum_c q_c * x_c over the lane's 4 columns. DEQUANT
    (several tokens): each weight dequantized once (sc * q), then one FMA per token; otherwise
    the scale multiplies the column sum."""
    if DEQUANT:
        acc += (sc * tl.reshape(q0, (1, BLOCK_N, KL, 1))) * tl.reshape(x0, (T_PAD, 1, KL, 1))
        acc += (sc * tl.reshape(q1, (1, BLOCK_N, KL, 1))) * tl.reshape(x1, (T_PAD, 1, KL, 1))
        acc += (sc * tl.reshape(q2, (1, BLOCK_N, KL, 1))) * tl.reshape(x2, (T_PAD, 1, KL, 1))
        acc += (sc * tl.reshape(q3, (1, BLOCK_N, KL, 1))) * tl.reshape(x3, (T_PAD, 1, KL, 1))
    else:
        s = tl.reshape(q0, (1, BLOCK_N, KL, 1)) * tl.reshape(x0, (T_PAD, 1, KL, 1))
        s += tl.reshape(q1, (1, BLOCK_N, KL, 1)) * tl.reshape(x1, (T_PAD, 1, KL, 1))
        s += tl.reshape(q2, (1, BLOCK_N, KL, 1)) * tl.reshape(x2, (T_PAD, 1, KL, 1))
        s += tl.reshape(q3, (1, BLOCK_N, KL, 1)) * tl.reshape(x3, (T_PAD, 1, KL, 1))
        acc += sc * s
    return acc


# (CHUNK weights a row per loop step, BLOCK_N rows a program, warps), one token. Generic kernel
# (dequant_tile): few rows and one or two warps a program keep loads in flight; long chunks
# amortize the loop. Lane kernels (LANE_KERNELS): one warp, BLOCK_N rows in each lane's registers;
# swept on an H100: Q4_K 4 rows beat 2 (1.0-1.3x), Q6_K 2 rows beat 4 (4 spill registers).
