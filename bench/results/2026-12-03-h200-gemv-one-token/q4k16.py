"""Experimental one-token Q4_K GEMV with coalesced lanes: 8 lanes a super-block, 16 quant bytes a lane."""
import torch
from kvspill.kernels.triton_compat import tl, triton
from kvspill.kernels.gguf_gemv_lane import _f16_bits, _magic_f32, _nibbles, _split4, _to_f32


@triton.jit
def _q4k_decode(h0, h1, h2, h3, sh, low):
    h1 = h1 >> sh
    h2 = h2 >> sh
    h3 = h3 >> sh
    sc = tl.where(low, h1 & 0x3F3F, (h3 & 0x0F0F) | ((h1 >> 2) & 0x3030))
    mn = tl.where(low, h2 & 0x3F3F, ((h3 >> 4) & 0x0F0F) | ((h2 >> 2) & 0x3030))
    d = _f16_bits(h0 & 0xFFFF)
    dmin = _f16_bits((h0 >> 16) & 0xFFFF)
    return (d * _magic_f32(sc & 0xFF, 0), d * _magic_f32(sc & 0xFF00, 8),
            dmin * _magic_f32(mn & 0xFF, 0), dmin * _magic_f32(mn & 0xFF00, 8))


@triton.jit
def _halves(v):
    """[M, 16] -> bytes 0..7 and 8..15 as two [M, 8]."""
    a, b = tl.split(tl.permute(tl.reshape(v, (v.shape[0], 2, 8)), (0, 2, 1)))
    return a, b


@triton.jit
def _chunk_sums(s_lo, s_hi, x_lo, x_hi, q_ptrs, xk, x_ok, o: tl.constexpr, VEC16: tl.constexpr, BLOCK_N: tl.constexpr, KL: tl.constexpr,
                USE_ASM: tl.constexpr, X_ASM: tl.constexpr):
    """Elementwise [BLOCK_N, KL, 8] products of one 16-byte chunk (bytes o..o+15 of the lane's item)
    with x, low and high nibbles, and the [1, KL, 8] x values summed."""
    if VEC16:
        qa, qb = _halves(tl.load(q_ptrs + o + tl.arange(0, 16)[None, :]))
    else:
        qa = tl.load(q_ptrs + o + tl.arange(0, 8)[None, :])
        qb = tl.load(q_ptrs + o + 8 + tl.arange(0, 8)[None, :])
    xla = _to_f32(tl.load(xk + o, mask=x_ok, other=0.0), X_ASM)
    xlb = _to_f32(tl.load(xk + o + 8, mask=x_ok, other=0.0), X_ASM)
    xha = _to_f32(tl.load(xk + o + 32, mask=x_ok, other=0.0), X_ASM)
    xhb = _to_f32(tl.load(xk + o + 40, mask=x_ok, other=0.0), X_ASM)
    qla, qha = _nibbles(qa, USE_ASM)
    qlb, qhb = _nibbles(qb, USE_ASM)
    s_lo = s_lo + tl.reshape(qla, (BLOCK_N, KL, 8)) * tl.reshape(xla, (1, KL, 8))
    s_lo = s_lo + tl.reshape(qlb, (BLOCK_N, KL, 8)) * tl.reshape(xlb, (1, KL, 8))
    s_hi = s_hi + tl.reshape(qha, (BLOCK_N, KL, 8)) * tl.reshape(xha, (1, KL, 8))
    s_hi = s_hi + tl.reshape(qhb, (BLOCK_N, KL, 8)) * tl.reshape(xhb, (1, KL, 8))
    x_lo = x_lo + tl.reshape(xla, (1, KL, 8)) + tl.reshape(xlb, (1, KL, 8))
    x_hi = x_hi + tl.reshape(xha, (1, KL, 8)) + tl.reshape(xhb, (1, KL, 8))
    return s_lo, s_hi, x_lo, x_hi


@triton.jit
def q4k_gemv16_kernel(x_ptr, w_ptr, out_ptr, rows, num_blocks, stride_w,
                      SB: tl.constexpr, BLOCK_N: tl.constexpr, VEC16: tl.constexpr, ITEM: tl.constexpr,
                      USE_ASM: tl.constexpr, X_ASM: tl.constexpr):
    IPS: tl.constexpr = 128 // ITEM  # items a super-block
    KL: tl.constexpr = IPS * SB
    pid = tl.program_id(0)
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]
    n = pid * BLOCK_N + i_w // KL
    row_ok = n < rows
    row = w_ptr + tl.where(row_ok, n, 0).to(tl.int64) * stride_w
    kl = i_w % KL
    s_w = kl // IPS
    g = (kl % IPS) // (32 // ITEM)
    sh = 16 * (g % 2)
    low = g < 2
    i_x = tl.arange(0, KL)[:, None]
    s_x = i_x // IPS
    IPG: tl.constexpr = 32 // ITEM  # items a 32-byte group
    j_x = i_x % IPS
    x_off = s_x * 256 + (j_x // IPG) * 64 + (j_x % IPG) * ITEM + tl.arange(0, 8)[None, :]
    acc = tl.zeros((BLOCK_N, KL, 1), dtype=tl.float32)
    for k in range(0, num_blocks, SB):
        ok = (k + s_w) < num_blocks
        blk = row + tl.where(ok, (k + s_w) * 144, 0)
        q_ptrs = blk + 16 + (kl % IPS) * ITEM
        h0, h1, h2, h3 = _split4(tl.load(blk.to(tl.pointer_type(tl.int32)) + tl.arange(0, 4)[None, :]))
        sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, sh, low)
        x_ok = (k + s_x) < num_blocks
        xk = x_ptr + k * 256 + x_off
        s_lo = tl.zeros((BLOCK_N, KL, 8), dtype=tl.float32)
        s_hi = tl.zeros((BLOCK_N, KL, 8), dtype=tl.float32)
        x_lo = tl.zeros((1, KL, 8), dtype=tl.float32)
        x_hi = tl.zeros((1, KL, 8), dtype=tl.float32)
        for o in tl.static_range(0, ITEM, 16):
            s_lo, s_hi, x_lo, x_hi = _chunk_sums(s_lo, s_hi, x_lo, x_hi, q_ptrs, xk, x_ok, o, VEC16, BLOCK_N, KL,
                                                 USE_ASM, X_ASM)
        acc += tl.reshape(sc_lo, (BLOCK_N, KL, 1)) * tl.sum(s_lo, axis=2, keep_dims=True)
        acc += tl.reshape(sc_hi, (BLOCK_N, KL, 1)) * tl.sum(s_hi, axis=2, keep_dims=True)
        acc -= (tl.reshape(mn_lo, (BLOCK_N, KL, 1)) * tl.sum(x_lo, axis=2, keep_dims=True)
                + tl.reshape(mn_hi, (BLOCK_N, KL, 1)) * tl.sum(x_hi, axis=2, keep_dims=True))
    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    n_out = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(out_ptr + n_out, out.to(out_ptr.dtype.element_ty), mask=n_out < rows)


def gemv16(x, w, sb=4, block_n=4, vec16=True, item=16, num_warps=None, out=None):
    rows = w.out_features
    if out is None:
        out = torch.empty((1, rows), dtype=x.dtype, device=x.device)
    gpu = x.device.type == "cuda"
    nw = num_warps or max(1, (128 // item) * sb // 32)
    q4k_gemv16_kernel[(triton.cdiv(rows, block_n),)](
        x, w.data, out, rows, w.in_features // 256, w.data.stride(0),
        SB=sb, BLOCK_N=block_n, VEC16=vec16, ITEM=item, USE_ASM=gpu, X_ASM=gpu, num_warps=nw)
    return out


@triton.jit
def _split_b(v, M: tl.constexpr):
    """[M, 8] (elements 4 c + b, c < 2) -> the 4 tensors [M, 2] of b = 0, 1, 2, 3."""
    t = tl.reshape(v, (M, 2, 2, 2))  # (c, b1, b0)
    e, o = tl.split(t)  # b0 = 0 / 1: [M, 2, 2] (c, b1)
    b0, b2 = tl.split(e)
    b1, b3 = tl.split(o)
    return b0, b1, b2, b3


@triton.jit
def _f(v, mask: tl.constexpr, expo: tl.constexpr):
    return ((v & mask) | expo).to(tl.float32, bitcast=True)


@triton.jit
def _word_nibbles(qw, USE_ASM: tl.constexpr):
    """int32 words -> 8 float32 tensors: 128 + the low nibble of byte b (b = 0..3), then 2048 + the
    high nibble of byte b. On the GPU: 3 shifts (one a rotate) and 8 LOP3s per word."""
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
        return (lo0.to(tl.float32, bitcast=True), lo1.to(tl.float32, bitcast=True),
                lo2.to(tl.float32, bitcast=True), lo3.to(tl.float32, bitcast=True),
                hi0.to(tl.float32, bitcast=True), hi1.to(tl.float32, bitcast=True),
                hi2.to(tl.float32, bitcast=True), hi3.to(tl.float32, bitcast=True))
    else:
        l8 = qw << 8
        r8 = qw >> 8
        return (_f(qw << 16, 0x000F0000, 0x43000000), _f(l8, 0x000F0000, 0x43000000),
                _f(qw, 0x000F0000, 0x43000000), _f(r8, 0x000F0000, 0x43000000),
                _f(l8, 0x0000F000, 0x45000000), _f(qw, 0x0000F000, 0x45000000),
                _f(r8, 0x0000F000, 0x45000000), _f(qw >> 16, 0x0000F000, 0x45000000))


@triton.jit
def _piece(s7, s11, xl, xh, q_ptrs, xk, x_ok, p: tl.constexpr, BLOCK_N: tl.constexpr, KL: tl.constexpr,
           USE_ASM: tl.constexpr, X_ASM: tl.constexpr):
    """8 quant bytes (piece p of the lane's 32) as 2 words: low nibble of byte b of word c at bits 16..19
    (128 + q), high nibble at bits 12..15 (2048 + q), times x; the x runs summed."""
    qw = tl.load(q_ptrs + 2 * p + tl.arange(0, 2)[None, :])  # [BN*KL, 2] int32
    x_lo = _to_f32(tl.load(xk + 8 * p, mask=x_ok, other=0.0), X_ASM)  # [KL, 8]
    x_hi = _to_f32(tl.load(xk + 32 + 8 * p, mask=x_ok, other=0.0), X_ASM)
    lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3 = _word_nibbles(qw, USE_ASM)
    xl0, xl1, xl2, xl3 = _split_b(x_lo, KL)
    xh0, xh1, xh2, xh3 = _split_b(x_hi, KL)
    s7 += tl.reshape(lo0, (BLOCK_N, KL, 2)) * tl.reshape(xl0, (1, KL, 2))
    s7 += tl.reshape(lo1, (BLOCK_N, KL, 2)) * tl.reshape(xl1, (1, KL, 2))
    s7 += tl.reshape(lo2, (BLOCK_N, KL, 2)) * tl.reshape(xl2, (1, KL, 2))
    s7 += tl.reshape(lo3, (BLOCK_N, KL, 2)) * tl.reshape(xl3, (1, KL, 2))
    s11 += tl.reshape(hi0, (BLOCK_N, KL, 2)) * tl.reshape(xh0, (1, KL, 2))
    s11 += tl.reshape(hi1, (BLOCK_N, KL, 2)) * tl.reshape(xh1, (1, KL, 2))
    s11 += tl.reshape(hi2, (BLOCK_N, KL, 2)) * tl.reshape(xh2, (1, KL, 2))
    s11 += tl.reshape(hi3, (BLOCK_N, KL, 2)) * tl.reshape(xh3, (1, KL, 2))
    xl += tl.reshape(x_lo, (1, KL, 8))
    xh += tl.reshape(x_hi, (1, KL, 8))
    return s7, s11, xl, xh


@triton.jit
def q4k_gemv_ns_kernel(x_ptr, w_ptr, out_ptr, rows, num_blocks, stride_w,
                       SB: tl.constexpr, BLOCK_N: tl.constexpr, USE_ASM: tl.constexpr, X_ASM: tl.constexpr):
    """One token; lane item = one 32-byte group of a super-block; no magic subtract: the sums of
    (2**E + q) x are corrected through the min term, E = 7 for low nibbles and 11 for high."""
    KL: tl.constexpr = 4 * SB
    pid = tl.program_id(0)
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]
    n = pid * BLOCK_N + i_w // KL
    row_ok = n < rows
    row = w_ptr + tl.where(row_ok, n, 0).to(tl.int64) * stride_w
    kl = i_w % KL
    s_w = kl // 4
    g = kl % 4
    sh = 16 * (g % 2)
    low = g < 2
    i_x = tl.arange(0, KL)[:, None]
    x_off = (i_x // 4) * 256 + (i_x % 4) * 64 + tl.arange(0, 8)[None, :]
    acc = tl.zeros((BLOCK_N, KL, 1), dtype=tl.float32)
    for k in range(0, num_blocks, SB):
        ok = (k + s_w) < num_blocks
        blk = row + tl.where(ok, (k + s_w) * 144, 0)
        words = blk.to(tl.pointer_type(tl.int32))
        h0, h1, h2, h3 = _split4(tl.load(words + tl.arange(0, 4)[None, :]))
        sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, sh, low)
        q_ptrs = words + 4 + g * 8
        x_ok = (k + i_x // 4) < num_blocks
        xk = x_ptr + k * 256 + x_off
        s7 = tl.zeros((BLOCK_N, KL, 2), dtype=tl.float32)
        s11 = tl.zeros((BLOCK_N, KL, 2), dtype=tl.float32)
        xl = tl.zeros((1, KL, 8), dtype=tl.float32)
        xh = tl.zeros((1, KL, 8), dtype=tl.float32)
        for p in tl.static_range(4):
            s7, s11, xl, xh = _piece(s7, s11, xl, xh, q_ptrs, xk, x_ok, p, BLOCK_N, KL, USE_ASM, X_ASM)
        sc_lo = tl.reshape(sc_lo, (BLOCK_N, KL, 1))
        sc_hi = tl.reshape(sc_hi, (BLOCK_N, KL, 1))
        acc += sc_lo * tl.sum(s7, axis=2, keep_dims=True) + sc_hi * tl.sum(s11, axis=2, keep_dims=True)
        acc -= (tl.reshape(mn_lo, (BLOCK_N, KL, 1)) + 128.0 * sc_lo) * tl.sum(xl, axis=2, keep_dims=True)
        acc -= (tl.reshape(mn_hi, (BLOCK_N, KL, 1)) + 2048.0 * sc_hi) * tl.sum(xh, axis=2, keep_dims=True)
    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    n_out = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(out_ptr + n_out, out.to(out_ptr.dtype.element_ty), mask=n_out < rows)


def gemv_ns(x, w, sb=8, block_n=4, num_warps=None, out=None):
    rows = w.out_features
    if out is None:
        out = torch.empty((1, rows), dtype=x.dtype, device=x.device)
    gpu = x.device.type == "cuda"
    q4k_gemv_ns_kernel[(triton.cdiv(rows, block_n),)](
        x, w.data, out, rows, w.in_features // 256, w.data.stride(0),
        SB=sb, BLOCK_N=block_n, USE_ASM=gpu, X_ASM=gpu, num_warps=num_warps or max(1, 4 * sb // 32))
    return out
