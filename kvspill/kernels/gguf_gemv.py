"""Fused dequantize-GEMV on GGUF quantized weights, for decode (few tokens, weight-bandwidth bound).

Shapes:
    quant_matmul_gemv: x [num_tokens <= 16, in_features] bf16 / fp16 / fp32, weight
                       QuantizedWeight [out_features, in_features], bias [out_features] or None
                       -> [num_tokens, out_features] in x's dtype

Scheme (after llama.cpp's mmvq): one program per BLOCK_N output rows walks K in chunks of whole
quant blocks; each chunk's raw bytes are read once, as contiguous byte runs per row, dequantized
in registers (gguf_dequant's per-type helpers) and multiplied with x, accumulating in fp32.
- One token (`_gemv_fma_kernel`, the common decode step): CUDA-core FMAs. The sub-block scale
  multiplies the sum of q * x over its sub-block, not each weight,
      sum_j (s * q_j + m) * x_j = s * sum_j q_j * x_j + m * sum_j x_j,
  and partial sums stay per sub-block until the one cross-thread reduction after the K loop.
- 2..16 tokens (`_gemv_dot_kernel`): the dequantized [BLOCK_N, CHUNK] tile (in x's dtype) meets
  x's [16, CHUNK] tile on the tensor cores, so the cost barely grows with the token count.

Tile constants (`FMA_CONFIG`, `DOT_CONFIG`) were picked by a sweep on an H200 (bench_gguf.py),
Llama-3-8B shapes. One token, GB/s of weight bytes: Q4_0 ~1000-1240, Q4_K ~1070-1320,
Q5_K ~950-1025, Q6_K ~890-965, Q8_0 ~2070-2280 (a bf16 torch GEMV: ~3500-3900). The kernel is
ALU-bound near 2e12 weights/s: decoding costs ~10 instructions a weight. What would lift it:
llama.cpp's int8 dot products (x quantized to q8_1, dp4a via inline asm) and packed f16x2 math.
2..16 tokens: ~350-540 GB/s for the 4/5/6-bit types, 670-1150 for Q8_0, flat in the token
count (about a dequantize-to-buffer plus a dense matmul); bound by the tile's trip through
shared memory into the dot layout, not by the tensor cores.

Invariants:
- The result equals dequantize_ref(weight) @ x.T up to fp32 reduction order; the dot kernel
  rounds the dequantized weight to x's dtype first (as a dense bf16 layer would hold it).
- Weight bytes are read once per launch: programs split the rows, never K.
"""

from __future__ import annotations

import os

import torch

from kvspill.kernels.gguf_dequant import dequant_tile, kernel_meta, tile_coords
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.triton_compat import tl, triton

MAX_GEMV_TOKENS = 16
# Triton's interpreter multiplies a bf16 tile made in the kernel wrongly in tl.dot (seen with
# triton 3.9), so there the dot runs in fp32.
_INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"


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
):
    # One token. Grid: (cdiv(rows, BLOCK_N),). acc holds per-sub-block partial sums; the one
    # cross-thread reduction happens after the K loop.
    pid = tl.program_id(0)
    n, kb0, a, b = tile_coords(pid, BLOCK_N, KB, NA, NB)
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    acc = tl.zeros((BLOCK_N, KB, NA, 1), dtype=tl.float32)
    for k in range(0, num_blocks, KB):
        kb = k + kb0
        kb_ok = kb < num_blocks  # [1, KB, 1, 1]
        q, scale, bias = dequant_tile(row_ptr + kb * TYPE_SIZE, (n < rows) & kb_ok, a, b, QTYPE)
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
    NUM_TOKENS: tl.constexpr,
    T_PAD: tl.constexpr,
    HAS_LINEAR_BIAS: tl.constexpr,
    DOT_F32: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Several tokens. Grid: (cdiv(rows, BLOCK_N),). The dequantized [BLOCK_N, KB * QK] tile (in
    # x's dtype, element order) meets x's [T_PAD >= 16, KB * QK] tile on the tensor cores.
    pid = tl.program_id(0)
    n, kb0, a, b = tile_coords(pid, BLOCK_N, KB, NA, NB)
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    tok = tl.arange(0, T_PAD)[:, None]
    cols = tl.arange(0, KB * QK)[None, :]
    acc = tl.zeros((T_PAD, BLOCK_N), dtype=tl.float32)
    for k in range(0, num_blocks, KB):
        kb = k + kb0
        q, scale, bias = dequant_tile(row_ptr + kb * TYPE_SIZE, (n < rows) & (kb < num_blocks), a, b, QTYPE)
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


# (CHUNK weights a row per loop step, BLOCK_N rows a program, warps). Few rows and one or two
# warps a program: many programs per SM keep loads in flight; long chunks amortize the loop.
_FMA_LEGACY = (1024, 4, 1)
FMA_CONFIG = {"Q4_0": _FMA_LEGACY, "Q4_1": _FMA_LEGACY, "Q5_0": _FMA_LEGACY, "Q5_1": _FMA_LEGACY}
FMA_CONFIG.update({"Q8_0": (2048, 2, 2), "Q4_K": (2048, 2, 1), "Q5_K": (1024, 4, 1), "Q6_K": (1024, 4, 2)})
DOT_CONFIG = (256, 16, 2)  # tl.dot needs >= 16 rows; longer chunks or more warps were slower


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


def quant_matmul_gemv(
    x: torch.Tensor,  # [num_tokens <= 16, in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
) -> torch.Tensor:
    """Triton fused dequantize + x @ W.T (+ bias) -> [num_tokens, out_features] in x's dtype."""
    check_gemv_args(x, weight, bias)
    num_tokens, rows = x.shape[0], weight.out_features
    out = torch.empty((num_tokens, rows), dtype=x.dtype, device=x.device)
    num_blocks = weight.in_features // weight.format.block_size
    if num_tokens == 0 or rows == 0:
        return out
    bias_arg = bias if bias is not None else x
    if num_tokens == 1:
        chunk, block_n, num_warps = FMA_CONFIG[weight.qtype]
        _gemv_fma_kernel[(triton.cdiv(rows, block_n),)](
            x,
            weight.data,
            bias_arg,
            out,
            rows,
            num_blocks,
            weight.data.stride(0),
            **kernel_meta(weight.qtype, chunk),
            HAS_LINEAR_BIAS=bias is not None,
            BLOCK_N=block_n,
            num_warps=num_warps,
        )
    else:
        chunk, block_n, num_warps = DOT_CONFIG
        _gemv_dot_kernel[(triton.cdiv(rows, block_n),)](
            x,
            weight.data,
            bias_arg,
            out,
            rows,
            num_blocks,
            x.stride(0),
            weight.data.stride(0),
            out.stride(0),
            **kernel_meta(weight.qtype, chunk),
            NUM_TOKENS=num_tokens,
            T_PAD=max(16, triton.next_power_of_2(num_tokens)),
            HAS_LINEAR_BIAS=bias is not None,
            DOT_F32=x.dtype == torch.float32 or _INTERPRETER,
            BLOCK_N=block_n,
            num_warps=num_warps,
        )
    return out
