"""Variant of kernels/gguf_gemv_lane.q4k_one_token_kernel with 16-byte weight loads (2 a group, not 4 of 8 bytes)."""
import torch
from kvspill.kernels.triton_compat import tl, triton
from kvspill.kernels.gguf_gemv_lane import (_q4k_decode, _split4, _split_bytes, _store_lane_sums, _to_f32,
                                             _word_nibbles)


@triton.jit
def _sums(s7, s11, x_lo, x_hi, qw, x_ptrs, x_ok, BLOCK_N: tl.constexpr, KL: tl.constexpr, USE_ASM: tl.constexpr,
          X_ASM: tl.constexpr):
    xl = _to_f32(tl.load(x_ptrs, mask=x_ok, other=0.0), X_ASM)
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
def ns16_kernel(x_ptr, w_ptr, out_ptr, rows, num_blocks, stride_w, SB: tl.constexpr, BLOCK_N: tl.constexpr,
                USE_ASM: tl.constexpr, X_ASM: tl.constexpr):
    KL: tl.constexpr = 4 * SB
    pid = tl.program_id(0)
    i_w = tl.arange(0, BLOCK_N * KL)[:, None]
    n = pid * BLOCK_N + i_w // KL
    row = w_ptr + tl.where(n < rows, n, 0).to(tl.int64) * stride_w
    sb_w = (i_w % KL) // 4
    g = i_w % 4
    i_x = tl.arange(0, KL)[:, None]
    x_off = (i_x // 4) * 256 + (i_x % 4) * 64 + tl.arange(0, 8)[None, :]
    acc = tl.zeros((BLOCK_N, KL, 1), dtype=tl.float32)
    for k in range(0, num_blocks, SB):
        words = (row + tl.where((k + sb_w) < num_blocks, (k + sb_w) * 144, 0)).to(tl.pointer_type(tl.int32))
        h0, h1, h2, h3 = _split4(tl.load(words + tl.arange(0, 4)[None, :]))
        sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, 16 * (g % 2), g < 2)
        x_ok = (k + i_x // 4) < num_blocks
        s7 = tl.zeros((BLOCK_N, KL, 2), dtype=tl.float32)
        s11 = tl.zeros((BLOCK_N, KL, 2), dtype=tl.float32)
        x_lo = tl.zeros((1, KL, 8), dtype=tl.float32)
        x_hi = tl.zeros((1, KL, 8), dtype=tl.float32)
        for h in tl.static_range(2):
            q4 = tl.load(words + 4 + g * 8 + 4 * h + tl.arange(0, 4)[None, :])  # [BN*KL, 4]
            qa, qb = tl.split(tl.permute(tl.reshape(q4, (BLOCK_N * KL, 2, 2)), (0, 2, 1)))
            xp = x_ptr + k * 256 + x_off + 16 * h
            s7, s11, x_lo, x_hi = _sums(s7, s11, x_lo, x_hi, qa, xp, x_ok, BLOCK_N, KL, USE_ASM, X_ASM)
            s7, s11, x_lo, x_hi = _sums(s7, s11, x_lo, x_hi, qb, xp + 8, x_ok, BLOCK_N, KL, USE_ASM, X_ASM)
        sc_lo = tl.reshape(sc_lo, (BLOCK_N, KL, 1))
        sc_hi = tl.reshape(sc_hi, (BLOCK_N, KL, 1))
        acc += sc_lo * tl.sum(s7, axis=2, keep_dims=True) + sc_hi * tl.sum(s11, axis=2, keep_dims=True)
        acc -= (tl.reshape(mn_lo, (BLOCK_N, KL, 1)) + 128.0 * sc_lo) * tl.sum(x_lo, axis=2, keep_dims=True)
        acc -= (tl.reshape(mn_hi, (BLOCK_N, KL, 1)) + 2048.0 * sc_hi) * tl.sum(x_hi, axis=2, keep_dims=True)
    out = tl.reshape(tl.sum(tl.sum(acc, axis=2), axis=1), (1, BLOCK_N))
    _store_lane_sums(out_ptr, out_ptr, out, pid, rows, 0, 1, 1, BLOCK_N, False)


def ns16(x, w, sb=8, block_n=4, num_warps=1, out=None):
    rows = w.out_features
    out = torch.empty((1, rows), dtype=x.dtype, device=x.device) if out is None else out
    gpu = x.device.type == "cuda"
    ns16_kernel[(triton.cdiv(rows, block_n),)](x, w.data, out, rows, w.in_features // 256, w.data.stride(0),
                                               SB=sb, BLOCK_N=block_n, USE_ASM=gpu, X_ASM=gpu, num_warps=num_warps)
    return out
