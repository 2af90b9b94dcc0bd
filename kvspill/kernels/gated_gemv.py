"""SiLU-and-mul in the epilogue of a one-token gate_up GEMV: silu(x @ G.T) * (x @ U.T) in one
launch for W = [G; U] (gate_up_proj's rows, I each); the GEMV kernels that take `GATED`
(kernels/fp8_gemv.py for bf16 / fp16 / fp8 weights, the Q4_K int16-x kernel) build on these.

Why: a batch-1 decode layer is about ten dependent kernels, and a boundary costs ~2 us on an H200
beyond the kernel's own time (bench/results/2026-12-03-h200-mma-two-acc); the SiLU kernel is one
of them. A program of the gated GEMV owns BLOCK_N / 2 gate rows and the same up rows, interleaved
(local row 2 i: gate row r + i, 2 i + 1: up row I + r + i, r = pid * BLOCK_N / 2), so when its sums
are done it holds both factors of its BLOCK_N / 2 outputs: the epilogue rounds them to x's dtype
(as the gate_up output would be stored), applies `fused_ops.silu_mul` and stores half as many
values. Nothing is added per program, unlike a SiLU prologue in the down GEMV, which re-reads x in
every program and lost (bench/results/2026-12-03-h200-fused-gemv-prologue).

Invariant: the result equals, bit for bit, the same GEMV's [1, 2 I] output followed by
fused_ops.silu_and_mul (same sums, same roundings, same silu code).
Switch: KVSPILL_FUSED_SILU=0 keeps the two launches (read per call).
"""

from __future__ import annotations

import os

from kvspill.kernels.fused_ops import silu_mul
from kvspill.kernels.pdl import pdl_wait, prefetch_l2
from kvspill.kernels.triton_compat import tl, triton


def fused_silu_enabled() -> bool:
    """Whether a one-token gate_up GEMV that can fuse SiLU-and-mul does (KVSPILL_FUSED_SILU=0: no)."""
    return os.environ.get("KVSPILL_FUSED_SILU", "1") != "0"


@triton.jit
def gated_rows(pid, local, half_rows, BLOCK_N: tl.constexpr):
    """Program pid's weight rows for local rows `local` (any shape, values in [0, BLOCK_N)): even
    ones the gate rows pid * BLOCK_N / 2 + local / 2, odd ones the up rows half_rows further.
    Returns (row, ok); rows of outputs past half_rows are not ok (their row may be out of range)."""
    r = pid * (BLOCK_N // 2) + local // 2
    return r + (local % 2) * half_rows, r < half_rows


@triton.jit
def prefetch_gated_rows_then_wait(
    w_ptr, pid, half_rows, stride_w, BLOCK_N: tl.constexpr, PDL: tl.constexpr, LINES: tl.constexpr
):
    """`pdl.prefetch_rows_then_wait` for the gated rows: the start of the program's gate rows and
    of its up rows (half the lines each), then `pdl_wait`."""
    first = pid * (BLOCK_N // 2)
    elem_bytes: tl.constexpr = w_ptr.dtype.element_ty.primitive_bitwidth // 8
    nbytes = tl.minimum(half_rows - first, BLOCK_N // 2) * stride_w * elem_bytes
    prefetch_l2(w_ptr + first.to(tl.int64) * stride_w, nbytes, PDL, LINES // 2)
    prefetch_l2(w_ptr + (first + half_rows).to(tl.int64) * stride_w, nbytes, PDL, LINES // 2)
    pdl_wait(PDL)


@triton.jit
def store_gated(out_ptr, bias_ptr, out, pid, half_rows, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    """out [1, BLOCK_N] fp32 sums of the program's interleaved rows (+ bias at those rows) ->
    silu(gate) * up into its BLOCK_N / 2 columns of out_ptr [1, half_rows]."""
    DTYPE: tl.constexpr = out_ptr.dtype.element_ty
    if HAS_BIAS:
        row, ok = gated_rows(pid, tl.arange(0, BLOCK_N)[None, :], half_rows, BLOCK_N)
        out += tl.load(bias_ptr + row, mask=ok, other=0.0).to(tl.float32)
    gate, up = tl.split(tl.reshape(out.to(DTYPE).to(tl.float32), (BLOCK_N // 2, 2)))
    cols = pid * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    tl.store(out_ptr + cols, silu_mul(gate, up, DTYPE), mask=cols < half_rows)
