"""Upper bound of pre-rounding x once a step for the one-token Q6_K GEMV: q6k_int16x_kernel (split
layout) against the same lanes reading x already rounded (int16 pairs, 2**e and the exact sum per
4 values, computed outside the timed region, as a producer kernel would store them), on the 8B
file's Q6_K shapes (v, down, lm_head), graph replays over weight copies past L2, bf16 x, the
table's configs. Why: lm_head's (512, 2, 1) rounds x in every lane for only 2 rows, so about half
of the kernel's instructions are x's. Prints one JSON line (us, max |diff| against the kernel)."""
import json
import os
import sys

import torch

from kvspill.kernels.gguf_dequant import block_at
from kvspill.kernels.gguf_formats import QuantizedWeight, split_q6k_rows
from kvspill.kernels.gguf_gemv import _int16x_config, quant_matmul_gemv
from kvspill.kernels.gguf_gemv_int16x import _dp2a_pair, int16_x_blocks
from kvspill.kernels.gguf_gemv_lane import _q6k_weight_lanes, _store_lane_sums, load_q6k_word, q6k_quant_bytes
from kvspill.kernels.pdl import LANE_PREFETCH_LINES, pdl_meta, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"


@triton.jit
def q6k_prex_kernel(xp_ptr, xs_ptr, xsum_ptr, w_ptr, out_ptr, rows, num_blocks, stride_w,
                    NB: tl.constexpr, BLOCK_N: tl.constexpr, USE_ASM: tl.constexpr, PDL: tl.constexpr = False):
    KL: tl.constexpr = 16 * NB
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, LANE_PREFETCH_LINES)
    row_off, sb_w, ql_off, qh_off, sc_off = _q6k_weight_lanes(pid, rows, stride_w, BLOCK_N, KL)
    kl = tl.arange(0, KL)
    sb_x = kl // 16
    g_x = sb_x * 64 + ((kl // 8) % 2) * 32 + (kl % 8)  # the lane's 4-value group of quarter 0
    acc = tl.zeros((BLOCK_N, KL), dtype=tl.float32)
    for k in range(0, num_blocks, NB):
        sb = tl.where((k + sb_w) < num_blocks, k + sb_w, 0)
        blk, sblk = block_at(w_ptr + row_off, sb, num_blocks, 210, True)
        x_ok = (k + sb_x) < num_blocks
        ql_a = load_q6k_word(blk + ql_off, True, USE_ASM)
        ql_b = load_q6k_word(blk + ql_off + 32, True, USE_ASM)
        qh = load_q6k_word(blk + qh_off, True, USE_ASM)
        d = tl.load((sblk + 208).to(tl.pointer_type(tl.uint16))).to(tl.float16, bitcast=True).to(tl.float32)
        for Q in tl.static_range(4):
            u = tl.reshape(q6k_quant_bytes(ql_a, ql_b, qh, Q), (BLOCK_N, KL))
            sc = tl.reshape(d * tl.load((sblk + sc_off + 2 * Q).to(tl.pointer_type(tl.int8))).to(tl.float32), (BLOCK_N, KL))
            g = k * 64 + g_x + 8 * Q
            a = tl.load(xp_ptr + 2 * g, mask=x_ok, other=0)
            b = tl.load(xp_ptr + 2 * g + 1, mask=x_ok, other=0)
            scale = tl.load(xs_ptr + g, mask=x_ok, other=0.0)
            xsum = tl.load(xsum_ptr + g, mask=x_ok, other=0.0)
            a = tl.broadcast_to(a[None, :], (BLOCK_N, KL))
            b = tl.broadcast_to(b[None, :], (BLOCK_N, KL))
            q_sums = _dp2a_pair(tl.zeros((BLOCK_N, KL), dtype=tl.int32), a, b, u, USE_ASM).to(tl.float32)
            acc += sc * (scale[None, :] * q_sums - 32.0 * xsum[None, :])
    out = tl.reshape(tl.sum(acc, axis=1), (1, BLOCK_N))
    _store_lane_sums(out_ptr, out_ptr, out, pid, rows, 0, 1, 1, BLOCK_N, False)


def prex(x):
    """x [1, K] -> (pairs int32 [K/4, 2], 2**e fp32 [K/4], sum fp32 [K/4]) as the kernel rounds."""
    xq, dx = int16_x_blocks(x[0], group=4)
    q = xq.to(torch.int32) & 0xFFFF
    pairs = torch.stack([q[:, 0] | (q[:, 1] << 16), q[:, 2] | (q[:, 3] << 16)], dim=1).contiguous()
    return pairs, dx.float().contiguous(), x[0].float().reshape(-1, 4).sum(dim=1).contiguous()


def launch(x3, w, out):
    chunk, block_n, warps = _int16x_config(w)
    q6k_prex_kernel[(triton.cdiv(w.out_features, block_n),)](
        *x3, w.data, out, w.out_features, w.in_features // 256, w.data.stride(0),
        NB=max(1, chunk // 256), BLOCK_N=block_n, USE_ASM=GPU, num_warps=warps, **pdl_meta(out.device))


def main():
    shapes = {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)} if GPU else {"small": (64, 1024)}
    result = {"label": sys.argv[1] if len(sys.argv) > 1 else ""}
    torch.manual_seed(0)
    for name, (rows, cols) in shapes.items():
        if GPU:
            from kvspill.bench.kernels_gguf import ROTATE_BYTES, random_weight_cuda
            w0 = random_weight_cuda("Q6_K", rows, cols)
        else:
            from kvspill.kernels.gguf_formats import random_quantized
            w0 = random_quantized("Q6_K", rows, cols)
        ws = [QuantizedWeight(split_q6k_rows(w0.data), "Q6_K", rows, cols, split=True)]
        if GPU:
            n = max(1, -(-ROTATE_BYTES // ws[0].nbytes))
            ws += [QuantizedWeight(ws[0].data.clone(), "Q6_K", rows, cols, split=True) for _ in range(n - 1)]
        x = torch.randn(1, cols, device=DEV).bfloat16()
        x3 = prex(x)
        ref = quant_matmul_gemv(x, ws[0]).float()
        out = torch.empty(1, rows, device=DEV, dtype=torch.bfloat16)
        launch(x3, ws[0], out)
        result[f"{name} diff"] = float((out.float() - ref).abs().max() / ref.abs().max())
        if GPU:
            from kvspill.bench.kernels_gguf import time_rotating_us
            result[f"{name} today"] = round(time_rotating_us(quant_matmul_gemv, ws, x), 2)
            result[f"{name} prex"] = round(time_rotating_us(lambda _x, w: launch(x3, w, out), ws, x), 2)
        del ws
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
