"""Fused dequantize-GEMV on GGUF quantized weights, for decode (few tokens, weight-bandwidth bound).

Shapes:
    quant_matmul_gemv: x [num_tokens <= 16, in_features] bf16 / fp16 / fp32, weight
                       QuantizedWeight [out_features, in_features], bias [out_features] or None
                       -> [num_tokens, out_features] in x's dtype

Kernels (`quant_matmul_gemv` picks one):
- Lane kernels, Q4_K and Q6_K (`LANE_KERNELS`), 1 token and, per `LANE_MULTI_CONFIG`, 2 (Q4_K)
  or 2..4 (Q6_K) tokens: one warp a program; each lane owns one piece of the K chunk (a 32-byte
  group of a Q4_K super-block; 4 columns of a Q6_K half-block) for all BLOCK_N rows and all
  tokens of the program in registers, so x is loaded and converted once per lane for all rows,
  each weight once for all tokens, and nothing crosses lanes until after the K loop. Weights
  become floats in inline PTX without int-to-float converts: a nibble is masked in place and
  OR-ed with the exponent that makes its float 2**E + nibble, then 2**E is subtracted (~3
  instructions a Q4_K weight with the FMA); Q6_K assembles 4 six-bit quants in a word, then one
  PRMT + one subtract a weight. One token multiplies the sub-block scale into the sum of q * x,
      sum_j (s * q_j - m) * x_j = s * sum_j q_j * x_j - m * sum_j x_j;
  several tokens dequantize each weight once (s * q - m) and then take one FMA a token.
  Loads are 2-D tiles [rows * lanes, run] reshaped to 4-D, so the lane mapping does not depend
  on how a Triton version orders the dimensions of a >2-D tile (3.6 and 3.9 differ).
  With KVSPILL_INT16_X=0, one token of bf16 / fp16 x on Q4_K (`Q4K_ONE_TOKEN_CONFIG`) takes
  gguf_gemv_offset's kernel: the same lanes, but nibbles become 2**E + q with no subtract
  (E = 7 low, 11 high) and 2**E * sc joins the min term; the kernel is issue-bound (ncu, H200: 51-57% of SM issue at 46-51% of DRAM
  bandwidth), so a quarter fewer instructions in the loop is 12% less time.
- One token of bf16 / fp16 x on Q4_K takes gguf_gemv_int16x's kernel unless KVSPILL_INT16_X=0:
  the same lanes on x rounded per 32 values to 14-bit integers (a power-of-two scale; the error
  is under bf16's own rounding of the block's largest value) and dp2a, under 1 instruction a
  weight in the dot (`python -m kvspill.bench.int16x_quality`: the rounding on real weights).
  Summed over the 5 Llama-3.1-8B shapes it takes 129 us against the offset kernel's 161 (H200).
- One token of bf16 / fp16 x on Q5_K takes the same int16-x lanes, each quant's fifth bit OR-ed
  into its byte from qh before the dp2a (`Q5K_INT16X`); on Q4_1 (int4 checkpoints) lanes of one
  32-weight block each unless KVSPILL_Q41_INT16X=0 (8B shapes 1.45-1.64x the generic kernel, H100).
- One token on Q8_0 takes int16-x lanes of two blocks each (`q80_int16x_kernel`, rows of an even
  block count) unless KVSPILL_Q80_INT16X=0 (8B shapes 1.16-1.39x the generic kernel, H100).
- 2-4 tokens on Q4_1 and 2 on Q5_K or Q8_0 take those lanes too, a pass per two tokens: the
  kernels' TWO form reads each block from HBM once for both (`lane_passes_launcher`,
  `LANE_PASSES_MAX_TOKENS`, KVSPILL_LANE_PASSES=N for 2..N on all three, 0 off; quant_linear's
  dispatch puts it before the tensor-core kernel).
- Generic FMA kernel (`_gemv_fma_kernel`, the other types, one token): one program per BLOCK_N
  rows walks K in chunks of whole blocks dequantized by gguf_dequant's per-type helpers;
  ~9-14 instructions a weight (ALU-bound).
- Dot kernel (`_gemv_dot_kernel`, the rest up to 16 tokens): the dequantized [BLOCK_N, CHUNK]
  tile (in x's dtype) meets x's [16, CHUNK] tile on the tensor cores; bound by the tile's trip
  through shared memory into the dot layout, flat in the token count.

Measured (bench/kernels_gguf.py, weights streamed from HBM, bf16 x; NVIDIA H100 80GB HBM3, Triton 3.6,
2026-11-26; D2D copy 3.0 TB/s), GB/s of weight bytes for qkv / o / gate_up / down / lm_head of
Llama-3.1-8B:
  Q4_K 1 token 1442 / 1216 / 2061 / 1709 / 2326 (generic kernel: 908 / 940 / 1357 / 1085 / 1516);
       2 tokens 1145 / 979 / 1484 / 1308 / 1673 (dot: 409 / 342 / 531 / 369 / 577);
  Q6_K 1 token 1277 / 1389 / 1762 / 1635 / 1898 (generic: 826 / 826 / 1026 / 913 / 1090);
       2 tokens ~1250-1840, 4 tokens 873-1324 (dot: 362-781);
  Q8_0 1 token (generic) 1718 / 1582 / 2217 / 1974 / 2308; 4 and 16 tokens (dot) 640-1400.
The small shapes (o: 9 MB of Q4_K, ~8 us) pay the launch and the tail of the grid.
NVIDIA H200, Triton 3.6, 2026-12-03 (bench/results/2026-12-03-h200-gemv-one-token; a read-only
kernel streams the same bytes at 67-105% of the 4.25 TB/s copy ceiling), us for the same shapes,
one bf16 token: Q4_K q4k_gemv_kernel 9.07 / 7.24 / 31.32 / 18.67 / 124.8, q4k_one_token_kernel
8.41 / 6.78 / 26.71 / 16.36 / 105.9; Q6_K CHUNK 2048 15.55 / 9.54 / 52.25 / 28.12 / 217.4, CHUNK
512 (now) 12.38 / 9.42 / 42.51 / 27.51 / 179.3.

Invariants:
- The result equals dequantize_ref(weight) @ x.T up to fp32 reduction order; the dot kernel
  rounds the dequantized weight to x's dtype first (as a dense bf16 layer would hold it);
  q4k_one_token_kernel's sums carry 2**E * x, so its fp32 rounding is ~2**-13 of sum |x| (within
  1e-4 of the largest output, far under the bf16 / fp16 output's rounding; fp32 x does not take it);
  q4k_int16x_kernel's x is off by <= 2**-14 of each 16 values' amax (gguf_gemv_int16x).
- Weight bytes are read once per launch: programs split the rows, never K.
- Inline PTX runs only on the GPU (Triton's interpreter takes the plain-Triton twin of each
  helper). Every packed PTX helper is elementwise per packed position, so its result does not
  depend on the register layout Triton picks; misaligned words are loaded one word per element.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvspill.env import lane_passes, q41_int16x_on, q80_int16x_on, switch_on
from kvspill.kernels.fp8_gemv import GemvFusion
from kvspill.kernels.gguf_dequant import block_at, dequant_tile, kernel_meta, tile_coords
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv_int16x import (
    q4k_int16x_kernel,
    q6k_int16x_kernel,
    q41_int16x_kernel,
    q80_int16x_kernel,
)
from kvspill.kernels.gguf_gemv_lane import q4k_gemv_kernel, q6k_gemv_kernel
from kvspill.kernels.gguf_gemv_offset import q4k_one_token_kernel
from kvspill.kernels.norm_handoff import launch_meta
from kvspill.kernels.pdl import PREFETCH_LINES, pdl_meta, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton

MAX_GEMV_TOKENS = 16


def _interpreted(x: torch.Tensor) -> bool:
    """Triton on CPU tensors is its interpreter: no inline PTX there, and its tl.dot multiplies a
    bf16 tile made in the kernel wrongly (seen with triton 3.9), so there the dot runs in fp32."""
    return x.device.type == "cpu"


@triton.jit
def _gemv_fma_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_w,
    QTYPE: tl.constexpr,
    QK: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    NA: tl.constexpr,
    NB: tl.constexpr,
    BIAS: tl.constexpr,
    KB: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr = False,
    SPLIT: tl.constexpr = False,  # Q6_K rows in the split layout (gguf_dequant.block_at)
):
    # One token. Grid: (cdiv(rows, BLOCK_N),). acc holds per-sub-block partial sums; the one
    # cross-thread reduction happens after the K loop.
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, PREFETCH_LINES)
    n, kb0, a, b = tile_coords(pid, BLOCK_N, KB, NA, NB)
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    acc = tl.zeros((BLOCK_N, KB, NA, 1), dtype=tl.float32)
    for k in range(0, num_blocks, KB):
        kb = k + kb0
        kb_ok = kb < num_blocks  # [1, KB, 1, 1]
        blk, sblk = block_at(row_ptr, kb, num_blocks, TYPE_SIZE, SPLIT)
        q, scale, bias = dequant_tile(blk, sblk, (n < rows) & kb_ok, a, b, QTYPE)
        x = tl.load(x_ptr + kb * QK + a * NB + b, mask=kb_ok, other=0.0).to(tl.float32)
        acc += scale * tl.sum(q * x, axis=3, keep_dims=True)
        if BIAS == 1:
            acc += bias * tl.sum(x, axis=3, keep_dims=True)
        elif BIAS == -1:
            acc -= bias * tl.sum(x, axis=3, keep_dims=True)
    out = tl.sum(tl.sum(tl.sum(acc, axis=3), axis=2), axis=1)  # [BLOCK_N]
    n_out = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_LINEAR_BIAS:
        out += tl.load(bias_ptr + n_out, mask=n_out < rows, other=0.0).to(tl.float32)
    tl.store(out_ptr + n_out, out.to(out_ptr.dtype.element_ty), mask=n_out < rows)


@triton.jit
def _gemv_dot_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    stride_x,
    stride_w,
    stride_o,
    QTYPE: tl.constexpr,
    QK: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    NA: tl.constexpr,
    NB: tl.constexpr,
    BIAS: tl.constexpr,
    KB: tl.constexpr,
    NUM_TOKENS,  # a runtime value: one compile serves every token count (issue 55)
    T_PAD: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    DOT_F32: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr = False,
    SPLIT: tl.constexpr = False,  # Q6_K rows in the split layout (gguf_dequant.block_at)
):
    # Several tokens. Grid: (cdiv(rows, BLOCK_N),). The dequantized [BLOCK_N, KB * QK] tile (in
    # x's dtype, element order) meets x's [T_PAD >= 16, KB * QK] tile on the tensor cores.
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, rows, stride_w, BLOCK_N, PDL, PREFETCH_LINES)
    n, kb0, a, b = tile_coords(pid, BLOCK_N, KB, NA, NB)
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    tok = tl.arange(0, T_PAD)[:, None]
    cols = tl.arange(0, KB * QK)[None, :]
    acc = tl.zeros((T_PAD, BLOCK_N), dtype=tl.float32)
    for k in range(0, num_blocks, KB):
        kb = k + kb0
        blk, sblk = block_at(row_ptr, kb, num_blocks, TYPE_SIZE, SPLIT)
        q, scale, bias = dequant_tile(blk, sblk, (n < rows) & (kb < num_blocks), a, b, QTYPE)
        w = scale * q
        if BIAS == 1:
            w += bias
        elif BIAS == -1:
            w -= bias
        w = tl.reshape(w, (BLOCK_N, KB * QK))
        x_mask = (tok < NUM_TOKENS) & (k * QK + cols < num_blocks * QK)
        x = tl.load(x_ptr + tok * stride_x + k * QK + cols, mask=x_mask, other=0.0)
        if DOT_F32:
            x = x.to(tl.float32)
        else:
            w = w.to(x_ptr.dtype.element_ty)
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    n_out = pid * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if HAS_LINEAR_BIAS:
        acc += tl.load(bias_ptr + n_out, mask=n_out < rows, other=0.0).to(tl.float32)
    out_mask = (tok < NUM_TOKENS) & (n_out < rows)
    tl.store(out_ptr + tok * stride_o + n_out, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


_FMA_LEGACY = (1024, 4, 1)
FMA_CONFIG = {
    "Q4_0": _FMA_LEGACY,
    "Q4_1": _FMA_LEGACY,
    "Q5_0": _FMA_LEGACY,
    "Q5_1": _FMA_LEGACY,
    "Q5_K": (1024, 4, 1),
}
FMA_CONFIG.update({"Q8_0": (2048, 2, 2), "Q4_K": (2048, 4, 1), "Q6_K": (512, 2, 1)})
# One token of bf16 / fp16 x on a Q4_K weight: q4k_one_token_kernel (CHUNK, BLOCK_N, warps); fp32 x
# takes q4k_gemv_kernel with FMA_CONFIG's (exact sums). None: always q4k_gemv_kernel (a baseline).
Q4K_ONE_TOKEN_CONFIG: tuple[int, int, int] | None = (2048, 4, 1)
# q4k_int16x_kernel's (CHUNK, BLOCK_N, warps): the first entry whose (in_features, rows) floors the
# weight reaches. Each is the best of 31 configs (2-16 lanes a thread) for the half-group lanes on the
# Llama-3.1-8B / 3.2-1B shapes it covers: down, lm_head, gate_up (both), qkv / q+k, o, 1B qkv
# (H200 sweep, bench/results/2026-12-04-h200-q4k-resweep).
Q4K_INT16X_CONFIGS: tuple[tuple[int, int, tuple[int, int, int]], ...] = (
    (8192, 0, (4096, 8, 4)),
    (0, 65536, (1024, 8, 1)),
    (0, 16384, (2048, 8, 2)),
    (4096, 5120, (4096, 16, 4)),
    (4096, 0, (4096, 8, 4)),
    (0, 0, (2048, 8, 2)),
)
# One token of bf16 / fp16 x on Q6_K in q6k_int16x_kernel: (CHUNK, BLOCK_N, warps), CHUNK // 256
# blocks of a row side by side in a loop step, the first entry whose (in_features, rows) floors the
# weight reaches; Q6K_INT16X = False takes the float lanes. Picked from 51 configs on the
# Llama-3.1-8B Q4_K_M file's Q6_K shapes (lm_head, down, v) and 3.2-1B's (lm_head, down), then
# checked on the other 8B / 1B shapes (H200, bench/results/2026-12-04-h200-q6k-side-by-side): a
# weight of few rows wants many of its blocks in flight (down 27.5 -> 23.8 us, v 4.6 -> 3.4, 8B
# qkv / o as Q6_K 14.3 / 9.6 -> 12.2 / 8.6, 1B v 2.6 -> 1.9), one of many rows or of short rows
# with 2048 or more the old (512, 2, 1) (lm_head 172 us either way; 14336 x 4096 23.6 old, 25.0
# with (2048, 2, 4); 1B qkv 5.2 -> 4.1).
Q6K_INT16X_CONFIGS: tuple[tuple[int, int, tuple[int, int, int]], ...] = (
    (4096, 65536, (512, 2, 1)),
    (0, 65536, (512, 4, 1)),
    (0, 8192, (512, 2, 1)),
    (4096, 4096, (2048, 2, 4)),
    (4096, 0, (4096, 2, 4)),
    (0, 2048, (512, 2, 1)),
    (0, 0, (2048, 2, 4)),
)
# The same for Q6_K weights in the split layout (QuantizedWeight.split: each row's quants, then its
# scales): the 8B file's down and v re-swept split (35-36 configs each, H200,
# bench/results/2026-12-05-h200-q6k-split, call 4), bit-equal outputs: down 25.1 us with the table's
# pick -> 22.3 (gguf's layout: 23.9), v 4.59 -> 3.85 (gguf's: 3.42); every other shape keeps the
# table's pick (not re-swept split).
Q6K_INT16X_SPLIT_CONFIGS: tuple[tuple[int, int, tuple[int, int, int]], ...] = (
    (4096, 65536, (512, 2, 1)),
    (0, 65536, (512, 4, 1)),
    (0, 8192, (512, 2, 1)),
    (14336, 4096, (2048, 4, 4)),
    (4096, 4096, (2048, 2, 4)),
    (4096, 2048, (4096, 2, 4)),
    (4096, 0, (2048, 1, 1)),
    (0, 2048, (512, 2, 1)),
    (0, 0, (2048, 2, 4)),
)
Q6K_INT16X = True
# One token of bf16 / fp16 x on Q5_K (the Q5_K_M files' main type) takes q4k_int16x_kernel's lanes
# with each quant's fifth bit joined from qh (Q5=True); False (or KVSPILL_INT16_X=0) takes the
# generic FMA kernel. Its configs are Q4K_INT16X_CONFIGS' (swept for Q4_K's 144-byte super-blocks,
# not for Q5_K's 176) but for (4096, 16, 4), which spills 528 bytes a thread with the qh words
# (compiled for sm_90: 255 registers); (4096, 8, 4) takes its place (249 registers, no spill).
# Swept on the 8B shapes (19-39 configs each, H100, bench/results/2026-12-05-h200-q41-configs, call
# 9): qkv 8.97 -> 8.59 us, o 5.72 -> 5.54, gate_up 32.2 -> 30.2 with half the rows a program,
# (4096, 4, 2); down and the lm_head kept theirs; random 8B Q5_K at 8K 337.4 -> 343.7 tok/s.
Q5K_INT16X = True
Q5K_INT16X_CONFIGS: tuple[tuple[int, int, tuple[int, int, int]], ...] = (
    (8192, 0, (4096, 8, 4)),
    (0, 65536, (1024, 8, 1)),
    (0, 16384, (4096, 4, 2)),
    (4096, 0, (4096, 4, 2)),
    (0, 0, (2048, 8, 2)),
)
# Two tokens on Q5_K or Q4_K in one pass (q4k_int16x_kernel's TWO form, the lane passes): the
# one-token picks spill there (sm_90 AOT, Triton 3.9: Q5_K (4096, 4, 2) 64 bytes of stack, (4096,
# 8, 4) 24; Q4_K (4096, 8, 4) 32, (2048, 8, 2) 32, (4096, 16, 4) 712); (2048, 4, 2) holds 144
# (Q5_K) / 177 (Q4_K) registers, none spilled. Not swept
# (bench/results/2026-12-05-h200-q41-configs, "Two-token lanes"). Triton 3.6 (the lent GPUs')
# spills none of the Q4_K ones: (4096, 16, 4) 189 registers, (2048, 4, 2) 96
# (bench/results/2026-12-06-h100-q4k-split-rows/scripts/aot_int16x.py with TWO).
K_QUANT_TWO_TOKEN_CONFIG = (2048, 4, 2)
# One token of bf16 / fp16 x on Q4_1 (int4 checkpoints) in q41_int16x_kernel (unless
# KVSPILL_Q41_INT16X=0, env.q41_int16x_on): (CHUNK, BLOCK_N, warps), CHUNK // 32 blocks a K step,
# the first entry whose (in_features, rows) floors the weight reaches. Swept on the 8B shapes
# (34-42 configs each, H200, bench/results/2026-12-05-h200-q41-configs): qkv 9.9 -> 8.3 us,
# o 6.9 -> 6.2, gate_up 29.3 -> 23.0, down 17.0 -> 15.7 against Q5_K's picks it had before (short
# Q4_1 blocks want more rows a program and fewer blocks a step than Q5_K's super-blocks); random
# 8B Q4_1 at 8K 349 -> 400 tok/s. The lm_head's entry keeps Q5_K's pick.
Q41_INT16X_CONFIGS: tuple[tuple[int, int, tuple[int, int, int]], ...] = (
    (0, 65536, (1024, 8, 1)),
    (8192, 0, (2048, 16, 4)),
    (0, 16384, (1024, 8, 1)),
    (0, 6144, (1024, 8, 1)),
    (0, 0, (2048, 16, 4)),
)
# One token of bf16 / fp16 x on Q8_0 rows of an even block count in q80_int16x_kernel (unless
# KVSPILL_Q80_INT16X=0, env.q80_int16x_on): (CHUNK, BLOCK_N, warps), CHUNK // 64 pairs of blocks a
# K step, the first entry whose (in_features, rows) floors the weight reaches. Swept on the 8B
# shapes (38-42 configs each, H100, bench/results/2026-12-05-h200-q41-configs, call 15): 16 rows a
# program for qkv (13.3 -> 13.0 us) and the lm_head (200 -> 194), 8 elsewhere (o, gate_up, down
# within 1-2% of their best); random 8B Q8_0 at 8K 243.5 -> 245.0 tok/s.
Q80_INT16X_CONFIGS: tuple[tuple[int, int, tuple[int, int, int]], ...] = (
    (0, 65536, (2048, 16, 4)),
    (8192, 0, (2048, 8, 4)),
    (0, 16384, (2048, 8, 4)),
    (0, 6144, (2048, 16, 4)),
    (0, 0, (2048, 8, 4)),
)
# The generic kernel's configs for the lane kernels' types (a benchmark baseline).
GENERIC_FMA_CONFIG = {"Q4_K": (2048, 2, 1), "Q6_K": (1024, 4, 2)}
DOT_CONFIG = (256, 16, 2)  # tl.dot needs >= 16 rows; longer chunks or more warps were slower
# Types with a lane kernel (GGUF data 4-byte aligned); removing one makes it take the generic
# kernels (a benchmark baseline).
LANE_KERNELS = {"Q4_K", "Q6_K"}
# Several tokens on the lane kernels: (CHUNK, BLOCK_N, warps) per token count padded to a power
# of two; other counts take the dot kernel. Q4_K with 3-4 tokens was no faster than the dot
# kernel on an H100 (335-521 GB/s vs 340-577), Q6_K with 3-4 tokens 1.7-2.8x faster.
LANE_MULTI_CONFIG: dict[str, dict[int, tuple[int, int, int]]] = {
    "Q4_K": {2: (2048, 4, 1)},
    "Q6_K": {2: (1024, 2, 1), 4: (1024, 2, 1)},
}
X_ASM = True  # bf16 x to fp32 in inline PTX (one instruction an element)


def check_gemv_args(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> None:
    """The shape, dtype, layout and device contract of `quant_matmul_gemv` (asserts only)."""
    assert x.dim() == 2 and x.stride(1) == 1, (
        f"x must be [num_tokens, in_features] with contiguous rows, got {tuple(x.shape)}"
    )
    assert x.shape[0] <= MAX_GEMV_TOKENS, f"the GEMV takes <= {MAX_GEMV_TOKENS} tokens, got {x.shape[0]}"
    assert x.shape[1] == weight.in_features, f"x has {x.shape[1]} features, weight {weight.in_features}"
    assert x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"unsupported x dtype {x.dtype}"
    assert x.device == weight.device, f"x on {x.device}, weight on {weight.device}"
    if bias is not None:
        assert bias.shape == (weight.out_features,) and bias.is_contiguous(), (
            f"bias must be [{weight.out_features}], got {tuple(bias.shape)}"
        )
        assert bias.device == x.device, f"bias on {bias.device}, x on {x.device}"


def check_out(out: torch.Tensor | None, x: torch.Tensor, rows: int) -> None:
    """The contract of a kernel wrapper's `out`: [num_tokens, rows] in x's dtype on x's device,
    elements of a row contiguous (rows may be strided: a column slice of a wider output)."""
    if out is not None:
        assert out.shape == (x.shape[0], rows) and out.dtype == x.dtype and out.stride(1) == 1, (
            f"out must be [{x.shape[0]}, {rows}] {x.dtype} with contiguous rows, got {tuple(out.shape)} "
            f"{out.dtype} strides {out.stride()}"
        )
        assert out.device == x.device, f"out on {out.device}, x on {x.device}"


def _lane_kernel_config(x: torch.Tensor, weight: QuantizedWeight) -> tuple[int, int, int] | None:
    """(CHUNK, BLOCK_N, warps) if `quant_matmul_gemv(x, weight)` takes a lane kernel, else None."""
    qtype, num_tokens = weight.qtype, x.shape[0]
    if qtype not in LANE_KERNELS or weight.data.data_ptr() % 4 != 0:
        return None
    if num_tokens == 1:
        return FMA_CONFIG[qtype]
    return LANE_MULTI_CONFIG[qtype].get(triton.next_power_of_2(num_tokens))


def _one_half_token(x: torch.Tensor, weight: QuantizedWeight, qtype: str) -> bool:
    """One token of bf16 / fp16 x on a `qtype` weight: what the one-token lanes below take."""
    return weight.qtype == qtype and x.shape[0] == 1 and x.dtype in (torch.bfloat16, torch.float16)


def _words_aligned(weight: QuantizedWeight) -> bool:
    """The weight's rows can be read as int32 words (data pointer and row stride)."""
    return weight.data.data_ptr() % 4 == 0 and weight.data.stride(0) % 4 == 0


def _one_token_q4k(x: torch.Tensor, weight: QuantizedWeight) -> bool:
    """Whether `quant_matmul_gemv(x, weight)` takes q4k_one_token_kernel."""
    return _one_half_token(x, weight, "Q4_K") and Q4K_ONE_TOKEN_CONFIG is not None


def int16_x() -> bool:
    """Whether one token of bf16 / fp16 x on Q4_K and Q6_K takes the int16-x kernels (read per
    call: KVSPILL_INT16_X=0 takes the float lanes; gguf_gemv_int16x says what they round)."""
    return switch_on("INT16_X")


def _int16x_config(weight: QuantizedWeight) -> tuple[int, int, int]:
    """The int16-x kernel's (CHUNK, BLOCK_N, warps) for a Q4_K, Q5_K, Q6_K, Q4_1 or Q8_0 weight (its
    type's and layout's table)."""
    if weight.qtype == "Q6_K":
        table = Q6K_INT16X_SPLIT_CONFIGS if weight.split else Q6K_INT16X_CONFIGS
    else:
        tables = {"Q5_K": Q5K_INT16X_CONFIGS, "Q4_1": Q41_INT16X_CONFIGS, "Q8_0": Q80_INT16X_CONFIGS}
        table = tables.get(weight.qtype, Q4K_INT16X_CONFIGS)
    return next(
        config
        for min_k, min_rows, config in table
        if weight.in_features >= min_k and weight.out_features >= min_rows
    )


def int16x_one_token_config(x: torch.Tensor, weight: QuantizedWeight) -> tuple[int, int, int] | None:
    """The (CHUNK, BLOCK_N, warps) of q4k_int16x_kernel (Q4_K, Q5_K) or q6k_int16x_kernel (Q6_K)
    where `quant_matmul_gemv(x, weight)` takes one of them for x's one token, else None (the
    dispatch below: the lane kernels' aligned words, then each type's switches)."""
    lanes = x.shape[0] == 1 and _lane_kernel_config(x, weight) is not None
    if weight.qtype == "Q4_K":
        takes = lanes and _one_token_q4k(x, weight) and int16_x()
    elif weight.qtype == "Q6_K":
        takes = lanes and _one_token_q6k_int16x(x, weight)
    else:
        takes = _one_token_q5k_int16x(x, weight)
    return _int16x_config(weight) if takes else None


def int16x_fusion_meta(fusion: GemvFusion | None, out: torch.Tensor, programs: int = 0) -> dict[str, object]:
    """The int16-x kernels' arguments for a norm handoff's part of `fusion` (fp8_gemv.GemvFusion:
    sums, a residual add, a handoff; `out` is the launch's output, the residual stream when there
    is one, `programs` its grid, for a handoff); none for no fusion."""
    if fusion is None:
        return {}
    assert fusion.norm_weight is None and not fusion.gated, "the int16-x GEMVs fold handed-off norms only"
    assert fusion.handoff is None or programs > 0, "a handoff's sums are one a program: give the grid"
    meta: dict[str, object] = launch_meta(fusion.sums, fusion.handoff, out, programs)
    if fusion.sums is not None:
        meta.update(eps=fusion.eps)
    if fusion.residual is not None:
        assert fusion.residual is out, "a residual add writes into the residual stream itself"
        meta.update(RESIDUAL=True)
    return meta


def quant_gemv_fused(
    x: torch.Tensor,  # [1, K]
    weight: QuantizedWeight,  # Q4_K, Q5_K or Q6_K on its int16-x lanes (`int16x_one_token_config`)
    bias: torch.Tensor | None,
    fusion: GemvFusion,
) -> torch.Tensor:
    """One token's int16-x GEMV with a handed-off norm, residual add or norm handoff folded in
    (`GemvFusion`'s contract: with a residual, the output is added into it and it is returned)."""
    rows = weight.out_features
    config = int16x_one_token_config(x, weight)
    assert config is not None, f"{weight.qtype}: no int16-x lanes for this x"
    res = fusion.residual
    assert res is None or (res.shape == (1, rows) and res.dtype == x.dtype and res.stride(1) == 1), (
        f"residual must be [1, {rows}] {x.dtype}"
    )
    assert fusion.handoff is None or res is not None, "a norm handoff comes from a residual add"
    out = res if res is not None else torch.empty((1, rows), dtype=x.dtype, device=x.device)
    meta = int16x_fusion_meta(fusion, out, triton.cdiv(rows, config[1]))
    if weight.qtype == "Q6_K":
        _launch_q6k_int16x(x, weight, bias, out, meta)
    else:
        _launch_q4k_one_token(x, weight, bias, out, meta)
    return out


def _one_token_q5k_int16x(x: torch.Tensor, weight: QuantizedWeight) -> bool:
    """Whether `quant_matmul_gemv(x, weight)` takes q4k_int16x_kernel with Q5=True."""
    return _one_half_token(x, weight, "Q5_K") and _words_aligned(weight) and Q5K_INT16X and int16_x()


def _one_token_q41_int16x(x: torch.Tensor, weight: QuantizedWeight) -> bool:
    """Whether `quant_matmul_gemv(x, weight)` takes q41_int16x_kernel (env.q41_int16x_on)."""
    return _one_half_token(x, weight, "Q4_1") and _words_aligned(weight) and q41_int16x_on() and int16_x()


def _one_token_q80_int16x(x: torch.Tensor, weight: QuantizedWeight) -> bool:
    """Whether `quant_matmul_gemv(x, weight)` takes q80_int16x_kernel (env.q80_int16x_on): rows of
    an even block count (whole 68-byte pairs), 4-byte aligned."""
    return (
        _one_half_token(x, weight, "Q8_0")
        and weight.in_features % 64 == 0
        and _words_aligned(weight)
        and q80_int16x_on()
        and int16_x()
    )


def _one_token_int16x_only(x: torch.Tensor, weight: QuantizedWeight) -> Callable[..., None] | None:
    """The launcher of the one-token int16-x lanes of a type without float lanes (Q5_K, Q4_1, Q8_0)
    where `quant_matmul_gemv(x, weight)` takes them, else None (the generic kernels)."""
    if _one_token_q5k_int16x(x, weight):
        return _launch_q4k_one_token
    if _one_token_q41_int16x(x, weight) or _one_token_q80_int16x(x, weight):
        return _launch_block_lanes
    return None


# Types whose int16-x lanes take two tokens in one pass (each block read once for both: the
# kernels' TWO form); the others' lane passes take one token each.
TWO_TOKEN_LANES = ("Q4_1", "Q8_0", "Q5_K", "Q4_K")
# The most tokens a step runs as lane passes on each type unless KVSPILL_LANE_PASSES says (above
# it the tensor-core, dot or float-lane kernel). Random 8B at N x 2K on an H100, tok/s in all,
# passes against the kernel they replace, alternated twice
# (bench/results/2026-12-05-h200-q41-configs, calls 22-24): Q4_1 2 / 3 / 4 tokens 595.4 / 491.6 /
# 650.2 against 245.8 / 347.9 / 460.8, 8 tokens 677.8 against 724.5 (the tensor cores win); Q5_K 2
# tokens 566.4 against 323.4, 3 / 4 461.4 / 608.8 against 471.4 / 623.8; Q8_0 2 tokens 326.9
# against 200.8, 3 / 4 259.3 / 345.4 against 303.7 / 402.5. A 2 x 2K step of Q4_1 in one pass
# took 3.36 ms, one sequence of 8K 2.9. Q4_K at 2 tokens (a Q4_K_M file's Q4_K weights; random
# llama-8b:q4_k_m 2 x 2K, H100, 2026-12-06): 541.3 / 541.8 against the float lanes'
# (LANE_MULTI_CONFIG) 472.1 / 474.2 (bench/results/2026-12-06-h100-gated-down, call 25).
LANE_PASSES_MAX_TOKENS = {"Q4_1": 4, "Q5_K": 2, "Q8_0": 2, "Q4_K": 2}


def lane_passes_launcher(x: torch.Tensor, weight: QuantizedWeight) -> Callable[..., None] | None:
    """The int16-x lanes' launcher where a step of x's 2..N tokens runs them a pass per two tokens
    (a token each for types not in TWO_TOKEN_LANES), N the type's LANE_PASSES_MAX_TOKENS or
    KVSPILL_LANE_PASSES (env.lane_passes), else None."""
    if x.shape[0] < 2:  # one token: no passes (and no environment read on that path)
        return None
    limit = lane_passes()
    if limit is None:
        limit = LANE_PASSES_MAX_TOKENS.get(weight.qtype, 0)
    if x.shape[0] > limit:
        return None
    if weight.qtype == "Q4_K":  # a LANE_KERNELS type: its integer-x lanes only
        integer_lanes = _one_token_q4k(x[:1], weight) and _words_aligned(weight) and int16_x()
        return _launch_q4k_one_token if integer_lanes else None
    return _one_token_int16x_only(x[:1], weight)


def _run_lane_passes(launch: Callable[..., None], x, weight, bias, out) -> None:
    """`lane_passes_launcher`'s passes over x's tokens (rows of x and out: contiguous columns)."""
    step = 2 if weight.qtype in TWO_TOKEN_LANES else 1
    for t in range(0, x.shape[0], step):
        launch(x[t : t + step], weight, bias, out[t : t + step])


def _launch_block_lanes(x, weight, bias, out) -> None:
    """q41_int16x_kernel (lane items of one Q4_1 block) or q80_int16x_kernel (two Q8_0 blocks), on
    one token or (their TWO form) two."""
    rows, k = weight.out_features, weight.in_features
    chunk, block_n, num_warps = _int16x_config(weight)
    kernel, item = (q41_int16x_kernel, 32) if weight.qtype == "Q4_1" else (q80_int16x_kernel, 64)
    assert x.shape[0] in (1, 2), f"the block lanes take 1 or 2 tokens, got {x.shape[0]}"
    kernel[(triton.cdiv(rows, block_n),)](
        x,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        k // item,
        weight.data.stride(0),
        x.stride(0),
        out.stride(0),
        HAS_LINEAR_BIAS=bias is not None,
        TWO=x.shape[0] == 2,
        KL=chunk // item,
        BLOCK_N=block_n,
        USE_ASM=not _interpreted(x),
        num_warps=num_warps,
        **pdl_meta(x.device),
    )


def _launch_q4k_one_token(x, weight, bias, out, fused: dict | None = None) -> None:
    """q4k_int16x_kernel (Q4_K and Q5_K) or, with KVSPILL_INT16_X=0, q4k_one_token_kernel (Q4_K)."""
    assert Q4K_ONE_TOKEN_CONFIG is not None
    rows, integer_x, two = weight.out_features, int16_x(), x.shape[0] == 2
    if two:  # the TWO form (lane passes)
        chunk, block_n, num_warps = K_QUANT_TWO_TOKEN_CONFIG
    else:
        chunk, block_n, num_warps = _int16x_config(weight) if integer_x else Q4K_ONE_TOKEN_CONFIG
    args = (x, weight.data, bias if bias is not None else x, out, rows, weight.in_features // 256)
    meta = dict(
        HAS_LINEAR_BIAS=bias is not None,
        SB=max(1, chunk // 256),
        BLOCK_N=block_n,
        USE_ASM=not _interpreted(x),
        num_warps=num_warps,
        **pdl_meta(x.device),
    )
    grid = (triton.cdiv(rows, block_n),)
    q5 = {"Q5": True} if weight.qtype == "Q5_K" else {}  # Q5_K comes here only with integer_x
    if integer_x:
        assert x.shape[0] in (1, 2), f"the int16-x lanes take 1 or 2 tokens, got {x.shape[0]}"
        strides = (weight.data.stride(0), x.stride(0), out.stride(0))
        q4k_int16x_kernel[grid](*args, *strides, **q5, TWO=two, **meta, **(fused or {}))
    else:
        assert not fused, "fusions run on the int16-x lanes only"
        q4k_one_token_kernel[grid](*args, weight.data.stride(0), X_ASM=X_ASM and not _interpreted(x), **meta)


def _one_token_q6k_int16x(x: torch.Tensor, weight: QuantizedWeight) -> bool:
    """Whether `quant_matmul_gemv(x, weight)` takes q6k_int16x_kernel."""
    return _one_half_token(x, weight, "Q6_K") and Q6K_INT16X and int16_x()


def _launch_q6k_int16x(x, weight, bias, out, fused: dict | None = None) -> None:
    rows = weight.out_features
    chunk, block_n, num_warps = _int16x_config(weight)
    q6k_int16x_kernel[(triton.cdiv(rows, block_n),)](
        x,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        weight.in_features // 256,
        weight.data.stride(0),
        NB=max(1, chunk // 256),
        BLOCK_N=block_n,
        HAS_LINEAR_BIAS=bias is not None,
        USE_ASM=not _interpreted(x),
        num_warps=num_warps,
        **pdl_meta(x.device),
        **_split_meta(weight),
        **(fused or {}),
    )


def _split_meta(weight: QuantizedWeight) -> dict[str, bool]:
    """The SPLIT constexpr of a Q6_K kernel: only where the rows are split (one compiled variant more)."""
    return {"SPLIT": True} if weight.split else {}


def _launch_lane_kernel(x, weight, bias, out, config) -> None:
    if _one_token_q4k(x, weight):
        _launch_q4k_one_token(x, weight, bias, out)
        return
    if _one_token_q6k_int16x(x, weight):
        _launch_q6k_int16x(x, weight, bias, out)
        return
    chunk, block_n, num_warps = config
    num_tokens, rows = x.shape[0], weight.out_features
    args = (
        x,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        weight.in_features // weight.format.block_size,
    )
    meta = dict(
        NUM_TOKENS=num_tokens,
        T_PAD=triton.next_power_of_2(num_tokens),
        HAS_LINEAR_BIAS=bias is not None,
        BLOCK_N=block_n,
        USE_ASM=not _interpreted(x),
        X_ASM=X_ASM and not _interpreted(x),
        DEQUANT=num_tokens > 1,
        num_warps=num_warps,
        **pdl_meta(x.device),
    )
    strides = (x.stride(0), weight.data.stride(0), out.stride(0))
    grid = (triton.cdiv(rows, block_n),)
    if weight.qtype == "Q4_K":
        q4k_gemv_kernel[grid](*args, *strides, SB=max(1, chunk // 256), **meta)
    else:  # Q6_K
        q6k_gemv_kernel[grid](*args, *strides, NSUB=max(1, chunk // 512), **meta, **_split_meta(weight))


def quant_matmul_gemv(
    x: torch.Tensor,  # [num_tokens <= 16, in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
    out: torch.Tensor | None = None,  # where to write it (`check_out`: rows may be strided)
) -> torch.Tensor:
    """Triton fused dequantize + x @ W.T (+ bias) -> [num_tokens, out_features] in x's dtype."""
    check_gemv_args(x, weight, bias)
    check_out(out, x, weight.out_features)
    num_tokens, rows = x.shape[0], weight.out_features
    out = out if out is not None else torch.empty((num_tokens, rows), dtype=x.dtype, device=x.device)
    if num_tokens == 0 or rows == 0:
        return out
    if (launch_passes := lane_passes_launcher(x, weight)) is not None:
        _run_lane_passes(launch_passes, x, weight, bias, out)
    elif (lane_config := _lane_kernel_config(x, weight)) is not None:
        _launch_lane_kernel(x, weight, bias, out, lane_config)
    elif (launch_int16x := _one_token_int16x_only(x, weight)) is not None:
        launch_int16x(x, weight, bias, out)
    elif num_tokens == 1:
        _launch_fma(x, weight, bias, out)
    else:
        _launch_dot(x, weight, bias, out)
    return out


def _launch_fma(x, weight, bias, out) -> None:
    """_gemv_fma_kernel: one token, any type (blocks dequantized by gguf_dequant's helpers)."""
    rows = weight.out_features
    chunk, block_n, num_warps = FMA_CONFIG[weight.qtype]
    _gemv_fma_kernel[(triton.cdiv(rows, block_n),)](
        x,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        weight.in_features // weight.format.block_size,
        weight.data.stride(0),
        **kernel_meta(weight.qtype, chunk),
        HAS_LINEAR_BIAS=bias is not None,
        BLOCK_N=block_n,
        num_warps=num_warps,
        **pdl_meta(x.device),
        **_split_meta(weight),
    )


def _launch_dot(x, weight, bias, out) -> None:
    """_gemv_dot_kernel: up to MAX_GEMV_TOKENS tokens, any type, the dequantized tile on tl.dot."""
    rows, num_tokens = weight.out_features, x.shape[0]
    chunk, block_n, num_warps = DOT_CONFIG
    _gemv_dot_kernel[(triton.cdiv(rows, block_n),)](
        x,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        weight.in_features // weight.format.block_size,
        x.stride(0),
        weight.data.stride(0),
        out.stride(0),
        **kernel_meta(weight.qtype, chunk),
        NUM_TOKENS=num_tokens,
        T_PAD=max(16, triton.next_power_of_2(num_tokens)),
        HAS_LINEAR_BIAS=bias is not None,
        DOT_F32=x.dtype == torch.float32 or _interpreted(x),
        BLOCK_N=block_n,
        num_warps=num_warps,
        **pdl_meta(x.device),
        **_split_meta(weight),
    )
