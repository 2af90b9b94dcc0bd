"""fp8 weight-only GEMV for decode: y = x @ (W_fp8 * scale).T (+ bias), 1-16 tokens; `dense_gemv`
runs the same kernel on bf16 / fp16 weights without a scale (model/layers.dense_linear's one token).

Shapes: x [num_tokens, K] bf16 / fp16 (rows contiguous); w_fp8 [N, K] float8_e4m3fn row-major;
w_scale [N] float32; bias [N] in x's dtype or None -> [num_tokens, N] in x's dtype.

Why a kernel of our own: at decode a linear layer is bound by reading its weight once. The
`torch._scaled_mm` path (kernels/fp8_linear.py) first quantizes the activations in a kernel of its
own, then runs a GEMM tiled for large M: at one token it read the 8B model's fp8 weights at about
half the bf16 GEMV's GB/s (decode 1.10x bf16 with half the bytes, H100, 2026-11-26). Here each
weight byte is read once, converted to bf16 in registers (every e4m3 value is exact in bf16 and
fp16) and multiplied by x as it is: activations are not quantized, so this path is more accurate
than `_scaled_mm`'s (the row scale is applied once to each fp32 dot product).

Two variants, one kernel (constexpr USE_DOT):
- one token: each program owns BLOCK_N rows; elementwise fp32 products [BLOCK_N, BLOCK_K]
  accumulated over K and reduced once after the loop (no cross-lane work inside the loop);
- 2-16 tokens: x padded to 16 rows, `tl.dot` of x [16, BLOCK_K] with the converted weight tile
  [BLOCK_K, BLOCK_N] (tensor cores; the padding costs FLOPs, which decode has to spare, not bytes).
Configurations come from `gemv_config`: measured on an H200 by `python -m kvspill.bench.kernels_fp8 --sweep`.

One token can fold the kernels around a projection into it (`GemvFusion`; model/llama.LlamaDecoderLayer):
the RMSNorm of x (each program sums x^2 over all of K, then normalizes the chunks it reads),
silu(gate) * up of a [1, 2K] x (an MLP's down projection), and the residual add after it (the
output is added into the residual stream in place: each program owns its rows). The values are
the ones the separate kernels (kernels/fused_ops.py) would have written, rounded where they round.

Invariant: equals `fp8_gemv_ref` (fp32 products of exact weights, scaled per row, rounded once)
up to fp32 summation order.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kvspill.kernels.fused_ops import silu_times
from kvspill.kernels.norm_handoff import (
    NormHandoff,
    add_into_stream,
    handed_rstd,
    launch_meta,
    load_handed_sums,
)
from kvspill.kernels.pdl import PREFETCH_LINES, pdl_meta, prefetch_rows_then_wait
from kvspill.kernels.triton_compat import tl, triton

MAX_GEMV_TOKENS = 16  # more tokens: the GEMM (`torch._scaled_mm`) path
DOT_ROWS = 16  # tl.dot's smallest M: 2-16 tokens pad to it


class GemvConfig(NamedTuple):
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


def gemv_config(num_tokens: int, n: int, k: int, weight_bytes: int = 2) -> GemvConfig:
    """Tile sizes by token count, shape and weight element size (1: fp8, 2: bf16 / fp16).
    One token, re-swept per shape with PDL and the early reads on (H100, 2026-12-05,
    bench/results/2026-12-05-h200-q41-configs, call 12; 19-63 tiles a shape): 16-bit weights take
    1024-wide K chunks on every 8B shape (qkv 19.2 -> 17.5 us, gate_up 77.5 -> 74.4, the lm_head
    339 -> 327), 4 rows x 2048 on the 8B's o (11.8 -> 11.4), and 8 x 512 with 4 stages on a 1B's
    short rows (qkv 6.6 -> 5.0, o 4.9 -> 3.7): 8B bf16 at 8K 171.0 -> 174.7 tok/s, Llama-3.2-1B
    817.5 -> 831.1 with the per-shape picks (these rules within 1% of them on each shape).
    fp8: 16-row blocks (H200, 2026-12-03, bench/results/2026-12-03-h200-gemv-tiles/) except rows of
    N <= 4096, 8 (the 8B's o 7.0 -> 6.5 us; down had 8 already). Several tokens: tl.dot needs
    BLOCK_N >= 16; 32 x 256 was best or within 1% for every 8B shape."""
    if num_tokens > 1:
        return GemvConfig(block_n=32, block_k=256, num_warps=4, num_stages=3)
    wide_k = 1024 if k % 1024 == 0 else 512
    if weight_bytes == 1:
        if n <= 4096:
            return GemvConfig(block_n=8, block_k=wide_k, num_warps=4, num_stages=3)
        if n >= 16384:
            return GemvConfig(block_n=16, block_k=256, num_warps=4, num_stages=3)
        return GemvConfig(block_n=16, block_k=512, num_warps=8, num_stages=3)
    if n <= 4096 and k <= 2048:
        return GemvConfig(block_n=8, block_k=512, num_warps=4, num_stages=4)
    if n <= 4096 and k <= 4096 and k % 2048 == 0:
        return GemvConfig(block_n=4, block_k=2048, num_warps=4, num_stages=3)
    return GemvConfig(block_n=8, block_k=wide_k, num_warps=4, num_stages=3)


class GemvFusion(NamedTuple):
    """What one token's GEMV does besides x @ W.T (+ bias); at most one of norm_weight / gated.

    norm_weight: x is the residual stream h [1, K]; the product takes rms_norm(h) * norm_weight
        (`kernels/fused_ops.rms_norm`'s rounding) with eps.
    gated: x is [1, 2K], gate then up; the product takes silu(gate) * up (`silu_and_mul`).
    residual: [1, N]; the output is added into it in place (rounded as `rms_norm`'s residual add
        rounds) and it is what the call returns.
    handoff (with residual): the next RMSNorm's weight; the launch fills its `scaled` and `sums`.
    sums (with eps): x is a NormHandoff's `scaled`; the products are scaled by its rstd.
    """

    norm_weight: torch.Tensor | None = None
    eps: float = 0.0
    gated: bool = False
    residual: torch.Tensor | None = None
    handoff: NormHandoff | None = None
    sums: torch.Tensor | None = None


def handed_over(handoff: NormHandoff) -> tuple[torch.Tensor, GemvFusion]:
    """The consumer's (x, fusion) of a handoff its producer has filled."""
    assert handoff.scaled is not None and handoff.sums is not None, "the producer has not run yet"
    return handoff.scaled, GemvFusion(eps=handoff.eps, sums=handoff.sums)


def fp8_gemv_ref(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """What the kernel computes: (x @ W_fp8.T in fp32) * scale (+ bias), rounded to x's dtype."""
    out = (x.float() @ w_fp8.float().t()) * w_scale[None, :]
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


@triton.jit
def _fp8_gemv_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    bias_ptr,
    out_ptr,
    N,
    K,
    stride_x,
    stride_w,
    stride_o,
    NUM_TOKENS,  # a runtime value: one compile serves every token count (issue 55)
    HAS_BIAS: tl.constexpr,
    USE_DOT: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    INTERPRETER: tl.constexpr,
    HAS_SCALE: tl.constexpr = True,
    PDL: tl.constexpr = False,
    norm_w_ptr=None,  # NORM: the RMSNorm weight [K]
    eps=0.0,
    NORM: tl.constexpr = False,
    GATED: tl.constexpr = False,
    RESIDUAL: tl.constexpr = False,
    ROW_BLOCK: tl.constexpr = 1,  # NORM: K rounded up to a power of two
    sums_ptr=None,  # SUMS: a NormHandoff's sums [num_sums]
    num_sums=1,
    SUMS: tl.constexpr = False,
    SUMS_PAD: tl.constexpr = 1,  # num_sums rounded up to a power of two
    hand_w_ptr=None,  # HANDOFF: the next norm's weight [N], its scaled h [1, N], its sums [grid]
    scaled_ptr=None,
    part_ptr=None,
    HANDOFF: tl.constexpr = False,
):
    # Grid: (cdiv(N, BLOCK_N),). Rows past N are masked (N need not divide BLOCK_N); K chunks are
    # masked unless EVEN_K. NORM / GATED / RESIDUAL / SUMS / HANDOFF (one token only): GemvFusion.
    pid = tl.program_id(0)
    prefetch_rows_then_wait(w_ptr, pid * BLOCK_N, N, stride_w, BLOCK_N, PDL, PREFETCH_LINES)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    kk = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + n.to(tl.int64)[:, None] * stride_w  # [BLOCK_N, 1]
    if USE_DOT:
        t = tl.arange(0, 16)
        t_ok = t < NUM_TOKENS
        out = _dot_over_k(
            x_ptr, w_rows, n_ok, kk, t, t_ok, K, stride_x, EVEN_K, BLOCK_N, BLOCK_K, NUM_STAGES, INTERPRETER
        )
    else:
        t = tl.arange(0, 1)
        t_ok = t < 1
        rstd = 1.0
        if NORM:
            rstd = _row_rstd(x_ptr, K, eps, ROW_BLOCK)
        if SUMS:  # loaded before the loop: no wait on the weights' path; fp8 (HAS_SCALE) sums them now
            sums = load_handed_sums(sums_ptr, num_sums, SUMS_PAD, HAS_SCALE)
        out = _fma_over_k(
            x_ptr, w_rows, n_ok, kk, K, norm_w_ptr, rstd, EVEN_K, BLOCK_N, BLOCK_K, NUM_STAGES, NORM, GATED
        )
        if SUMS:
            out = out * handed_rstd(sums, K, eps, HAS_SCALE)
    if HAS_SCALE:
        out = out * tl.load(scale_ptr + n, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        out += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + t[:, None] * stride_o + n[None, :]
    out_ok = t_ok[:, None] & n_ok[None, :]
    y = out.to(out_ptr.dtype.element_ty)
    if RESIDUAL:  # one token: out_ptr is the residual stream's row
        add_into_stream(y, n, n_ok, pid, out_ptr, hand_w_ptr, scaled_ptr, part_ptr, HANDOFF)
    else:
        tl.store(out_ptrs, y, mask=out_ok)


@triton.jit
def _dot_over_k(
    x_ptr,
    w_rows,
    n_ok,
    kk,
    t,
    t_ok,
    K,
    stride_x,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    INTERPRETER: tl.constexpr,
):
    """2-16 tokens: x [16, BLOCK_K] (rows past the tokens are 0) times each weight chunk, converted
    to x's dtype, on tensor cores. Returns the fp32 sums [16, BLOCK_N], unscaled."""
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
        k = k0 + kk
        x_ptrs = x_ptr + t[:, None] * stride_x + k[None, :]
        if EVEN_K:
            w = tl.load(w_rows + k[None, :], mask=n_ok[:, None], other=0.0)
            x = tl.load(x_ptrs, mask=t_ok[:, None], other=0.0)
        else:
            k_ok = (k < K)[None, :]
            w = tl.load(w_rows + k[None, :], mask=n_ok[:, None] & k_ok, other=0.0)
            x = tl.load(x_ptrs, mask=t_ok[:, None] & k_ok, other=0.0)
        if INTERPRETER:  # its bf16 tl.dot of converted fp8 gives garbage (triton 3.x): fp32 is exact
            acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc)
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    return acc


@triton.jit
def _fma_over_k(
    x_ptr,
    w_rows,
    n_ok,
    kk,
    K,
    norm_w_ptr,
    rstd,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    NORM: tl.constexpr,
    GATED: tl.constexpr,
):
    """One token: elementwise fp32 products [BLOCK_N, BLOCK_K] summed over the K chunks, reduced
    across K once after the loop. Returns the sums [1, BLOCK_N], unscaled."""
    acc2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
        k = k0 + kk
        if EVEN_K:
            w = tl.load(w_rows + k[None, :], mask=n_ok[:, None], other=0.0)
        else:
            w = tl.load(w_rows + k[None, :], mask=n_ok[:, None] & (k < K)[None, :], other=0.0)
        x = _x_chunk(x_ptr, k, K, norm_w_ptr, rstd, EVEN_K, NORM, GATED)
        acc2 += w.to(tl.float32) * x.to(tl.float32)[None, :]
    return tl.reshape(tl.sum(acc2, axis=1), (1, BLOCK_N))


@triton.jit
def _x_chunk(x_ptr, k, K, norm_w_ptr, rstd, EVEN_K: tl.constexpr, NORM: tl.constexpr, GATED: tl.constexpr):
    """One token's x at columns k in x's dtype: as stored, or the values fused_ops' kernels would
    have written: silu(gate) * up (GATED: gate at k, up at K + k), rms_norm (NORM: rstd given)."""
    if EVEN_K:
        x = tl.load(x_ptr + k)
    else:
        x = tl.load(x_ptr + k, mask=k < K, other=0.0)
    if GATED:
        up = tl.load(x_ptr + K + k) if EVEN_K else tl.load(x_ptr + K + k, mask=k < K, other=0.0)
        x = silu_times(x, up, x_ptr.dtype.element_ty)
    if NORM:
        if EVEN_K:
            norm_w = tl.load(norm_w_ptr + k).to(tl.float32)
        else:
            norm_w = tl.load(norm_w_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        normed = (x.to(tl.float32) * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        x = (normed * norm_w).to(x_ptr.dtype.element_ty)
    return x


@triton.jit
def _row_rstd(x_ptr, K, eps, ROW_BLOCK: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) of one token's row, as kernels/fused_ops' RMSNorm computes it:
    the whole row in one load (one L2 round trip before the loop, not one a K chunk)."""
    cols = tl.arange(0, ROW_BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    return 1.0 / tl.sqrt(tl.sum(x * x, 0) / K + eps)


def fp8_gemv(
    x: torch.Tensor,  # [num_tokens, K], 1 <= num_tokens <= MAX_GEMV_TOKENS
    w_fp8: torch.Tensor,  # [N, K] float8_e4m3fn, rows contiguous
    w_scale: torch.Tensor,  # [N] float32
    bias: torch.Tensor | None = None,  # [N] in x's dtype
    config: GemvConfig | None = None,  # benchmarks sweep it; None = gemv_config's choice
    fusion: GemvFusion | None = None,  # one token: the norm / SiLU / residual add folded in
) -> torch.Tensor:
    """Triton wrapper; same contract as `fp8_gemv_ref` (with a fusion: `GemvFusion`'s)."""
    return _launch_gemv(x, w_fp8, w_scale, bias, config, fusion)


def dense_gemv(
    x: torch.Tensor,  # [num_tokens, K], 1 <= num_tokens <= MAX_GEMV_TOKENS
    w: torch.Tensor,  # [N, K] in x's dtype, rows contiguous
    bias: torch.Tensor | None = None,  # [N] in x's dtype
    config: GemvConfig | None = None,
    fusion: GemvFusion | None = None,
) -> torch.Tensor:
    """The same kernel on weights in x's dtype (no scale): x @ w.T (+ bias), fp32 sums."""
    assert w.dtype == x.dtype, f"w {w.dtype} must be x's dtype {x.dtype}"
    return _launch_gemv(x, w, None, bias, config, fusion)


def _fusion_operands(
    x: torch.Tensor, n: int, fusion: GemvFusion | None
) -> tuple[int, torch.Tensor | None, torch.Tensor | None]:
    """(K, norm weight, residual) of a launch, checked: K is half of a gated x's row."""
    k = x.shape[1]
    if fusion is None:
        return k, None, None
    assert x.shape[0] == 1, f"a fused GEMV takes one token, got {x.shape[0]}"
    assert fusion.norm_weight is None or not fusion.gated, "norm and gated exclude each other"
    if fusion.gated:
        assert k % 2 == 0, f"a gated x is [1, 2K], got {k} columns"
        k //= 2
    if fusion.norm_weight is not None:
        assert fusion.norm_weight.shape == (k,) and fusion.norm_weight.is_contiguous()
        assert fusion.norm_weight.dtype == x.dtype, f"norm weight {fusion.norm_weight.dtype}, x {x.dtype}"
    res = fusion.residual
    if res is not None:
        assert res.shape == (1, n) and res.dtype == x.dtype and res.stride(1) == 1, (
            f"residual must be [1, {n}] {x.dtype}, got {tuple(res.shape)} {res.dtype}"
        )
    if fusion.handoff is not None:
        assert res is not None, "a norm handoff comes from a GEMV that adds into the residual stream"
    if fusion.sums is not None:
        assert fusion.norm_weight is None and not fusion.gated, "sums take a handed-off x only"
    return k, fusion.norm_weight, res


def _launch_gemv(
    x: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor | None,
    bias: torch.Tensor | None,
    config: GemvConfig | None,
    fusion: GemvFusion | None = None,
) -> torch.Tensor:
    num_tokens = x.shape[0]
    n = w.shape[0]
    k, norm_weight, residual = _fusion_operands(x, n, fusion)
    assert 1 <= num_tokens <= MAX_GEMV_TOKENS, f"{num_tokens} tokens: the GEMV takes 1..{MAX_GEMV_TOKENS}"
    assert x.dtype in (torch.bfloat16, torch.float16) and x.stride(1) == 1, f"x {x.dtype} {x.stride()}"
    assert w.shape[1] == k and w.stride(1) == 1
    cfg = config or gemv_config(num_tokens, n, k, w.element_size())
    out = residual if residual is not None else torch.empty((num_tokens, n), dtype=x.dtype, device=x.device)
    programs = triton.cdiv(n, cfg.block_n)
    _fp8_gemv_kernel[(programs,)](
        x,
        w,
        w_scale if w_scale is not None else w,  # never read without HAS_SCALE
        bias if bias is not None else w,  # never read without HAS_BIAS
        out,
        n,
        k,
        x.stride(0),
        w.stride(0),
        out.stride(0),
        NUM_TOKENS=num_tokens,
        HAS_BIAS=bias is not None,
        USE_DOT=num_tokens > 1,
        EVEN_K=k % cfg.block_k == 0,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        NUM_STAGES=cfg.num_stages,
        INTERPRETER=x.device.type == "cpu",  # Triton on CPU tensors is the interpreter
        HAS_SCALE=w_scale is not None,
        norm_w_ptr=norm_weight if norm_weight is not None else w,  # never read without NORM
        eps=fusion.eps if fusion is not None else 0.0,
        NORM=norm_weight is not None,
        GATED=fusion is not None and fusion.gated,
        RESIDUAL=residual is not None,
        ROW_BLOCK=triton.next_power_of_2(k) if norm_weight is not None else 1,
        **(launch_meta(fusion.sums, fusion.handoff, out, programs) if fusion is not None else {}),
        num_warps=cfg.num_warps,
        **pdl_meta(x.device),
    )
    return out
