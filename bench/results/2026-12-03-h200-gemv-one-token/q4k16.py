"""Experimental one-token Q4_K GEMV with coalesced lanes (call 2): 8 lanes a super-block, 16 quant bytes a lane;
and gemv_ns, the offset-sum kernel (calls 3-5)."""
import torch
from kvspill.kernels.triton_compat import tl, triton
from kvspill.kernels.gguf_gemv_lane import _nibbles, _q4k_decode, _split4, _to_f32


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


def gemv_ns(x, w, sb=8, block_n=4, num_warps=None, out=None):
    """The offset-sum kernel of calls 3-5, now kvspill/kernels/gguf_gemv_offset.py (its code moved
    there unchanged but for the bias and the loop step as a helper)."""
    from kvspill.kernels.gguf_gemv_offset import q4k_one_token_kernel

    rows = w.out_features
    if out is None:
        out = torch.empty((1, rows), dtype=x.dtype, device=x.device)
    gpu = x.device.type == "cuda"
    q4k_one_token_kernel[(triton.cdiv(rows, block_n),)](
        x, w.data, x, out, rows, w.in_features // 256, w.data.stride(0), HAS_LINEAR_BIAS=False,
        SB=sb, BLOCK_N=block_n, USE_ASM=gpu, X_ASM=gpu, num_warps=num_warps or max(1, 4 * sb // 32))
    return out
