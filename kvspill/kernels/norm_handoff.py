"""The norm handoff: an RMSNorm after a residual add, computed by the two one-token GEMVs around
it instead of a kernel of its own (`KVSPILL_NORM_HANDOFF`, model/llama.LlamaDecoderLayer's fused
form). The GEMV that adds into the residual stream (the producer: o, down) also writes h * weight
and, one float a program, its rows' sums of h^2; the GEMV after the norm (the consumer: gate_up,
the next layer's qkv) reads those values as x, sums the few floats once a program and scales its
dot products by rstd. The kernels that take part (kernels/fp8_gemv.py's fp8 / dense GEMV, the
int16-x GEMVs of kernels/gguf_gemv_int16x.py and gguf_gemv_mixed.py) call the pieces below.

Invariant: the consumer's output is W (h * weight) * rstd, where the RMSNorm kernel computes
W (bf16(h * rstd) * weight): the same math with one rounding moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvspill.kernels.triton_compat import tl, triton


@dataclass
class NormHandoff:
    """The RMSNorm after a residual add, handed from the GEMV that adds into the residual stream
    (its producer: fp8_gemv.GemvFusion.residual and .handoff) to the GEMV after the norm (its
    consumer: x = `scaled`, GemvFusion.sums = `sums`, eps), so that neither recomputes it per program.

    The producer's programs each own rows of the new residual h: they write scaled = h * weight
    (rounded to x's dtype) and, one float a program, the sum of h^2 over their rows (`sums`,
    set by the producer's launch). The consumer sums `sums` once a program (no pass over h) and
    scales its fp32 dot products by rstd = 1 / sqrt(sum / K + eps): W (h * weight) * rstd, where
    the RMSNorm kernel rounds h * rstd to x's dtype before the weight. Same math, one rounding
    moved (`KVSPILL_NORM_HANDOFF`).
    """

    weight: torch.Tensor  # the norm's weight [N]
    eps: float
    scaled: torch.Tensor | None = None  # [1, N], written by the producer
    sums: torch.Tensor | None = None  # [programs] float32, written by the producer


def sums_meta(sums: torch.Tensor) -> dict:
    """A consumer launch's SUMS arguments: the producer's sums (float32 [programs])."""
    assert sums.dtype == torch.float32 and sums.dim() == 1 and sums.is_contiguous(), (
        f"sums must be float32 [programs], got {sums.dtype} {tuple(sums.shape)}"
    )
    return dict(
        sums_ptr=sums, num_sums=sums.numel(), SUMS=True, SUMS_PAD=triton.next_power_of_2(sums.numel())
    )


def handoff_meta(handoff: NormHandoff, out: torch.Tensor, programs: int) -> dict:
    """A producer launch's HANDOFF arguments (`out` [1, N]: the residual stream it adds into,
    `programs` its grid): the NormHandoff gets its `scaled` and `sums` here (new tensors: under
    a CUDA graph, from its pool)."""
    n = out.shape[1]
    weight = handoff.weight
    assert weight.shape == (n,) and weight.dtype == out.dtype and weight.is_contiguous(), (
        f"the handed-off norm's weight must be [{n}] {out.dtype}, got {tuple(weight.shape)} {weight.dtype}"
    )
    handoff.scaled = torch.empty_like(out)
    handoff.sums = torch.empty(programs, dtype=torch.float32, device=out.device)
    return dict(hand_w_ptr=weight, scaled_ptr=handoff.scaled, part_ptr=handoff.sums, HANDOFF=True)


def launch_meta(
    sums: torch.Tensor | None, handoff: NormHandoff | None, out: torch.Tensor, programs: int
) -> dict:
    """A GEMV launch's SUMS / HANDOFF arguments: a consumer's `sums` (`sums_meta`), a producer's
    `handoff` (`handoff_meta`: `out` the residual stream it adds into, `programs` its grid)."""
    meta: dict = {}
    if sums is not None:
        meta.update(sums_meta(sums))
    if handoff is not None:
        meta.update(handoff_meta(handoff, out, programs))
    return meta


@triton.jit
def load_handed_sums(sums_ptr, num_sums, SUMS_PAD: tl.constexpr, SUM_EARLY: tl.constexpr = False):
    """A NormHandoff consumer's load of the producer's per-program sums of h^2 (issued early; the
    values are needed only by `handed_rstd`, after the K loop). SUM_EARLY: summed here, so that
    one float instead of SUMS_PAD lives through the K loop: 1.2% faster on 8B fp8 (H100), 1%
    slower on the dense W1 (bench/results/2026-12-07-fixed-kernels, call 6)."""
    i = tl.arange(0, SUMS_PAD)
    sums = tl.load(sums_ptr + i, mask=i < num_sums, other=0.0)
    if SUM_EARLY:
        sums = tl.sum(sums, 0)
    return sums


@triton.jit
def handed_rstd(sums, K, eps, SUM_EARLY: tl.constexpr = False):
    """1 / sqrt(mean(h^2) + eps) from the loaded sums (RMSNorm's rstd over K columns; SUM_EARLY as
    `load_handed_sums` had it: their total already)."""
    total = sums
    if not SUM_EARLY:
        total = tl.sum(sums, 0)
    return 1.0 / tl.sqrt(total / K + eps)


@triton.jit
def store_handoff(h, weight, n, n_ok, pid, scaled_ptr, part_ptr):
    """A NormHandoff's producer part: this program's rows n of the new residual h [1, BLOCK_N]
    times the norm's weight (its rows n, fp32) into `scaled`, their sum of squares into sums[pid]
    (rows past N, which some kernels compute from row 0, left out)."""
    hf = tl.where(n_ok[None, :], h.to(tl.float32), 0.0)
    tl.store(scaled_ptr + n[None, :], (hf * weight[None, :]).to(h.dtype), mask=n_ok[None, :])
    tl.store(part_ptr + pid, tl.sum(tl.sum(hf * hf, axis=1), axis=0))


@triton.jit
def add_into_stream(y, n, n_ok, pid, out_ptr, hand_w_ptr, scaled_ptr, part_ptr, HANDOFF: tl.constexpr):
    """A one-token GEMV's output rows n (y [1, BLOCK_N], rounded to the stream's dtype) added into
    the residual stream at out_ptr, rounded as the RMSNorm kernel's add rounds (this program alone
    owns its rows); HANDOFF: then the next norm's part (`store_handoff`), its weight loaded with
    the stream's rows (one trip to memory at the kernel's tail, not two: -0.4 to -0.7% a decode
    step on W1, 8B fp8 and Q4_K_M, bench/results/2026-12-07-fixed-kernels, call 9)."""
    ptrs = out_ptr + n[None, :]
    stream = tl.load(ptrs, mask=n_ok[None, :], other=0.0).to(tl.float32)
    weight = tl.load(hand_w_ptr + n, mask=n_ok, other=0.0).to(tl.float32) if HANDOFF else 0.0
    h = (y.to(tl.float32) + stream).to(y.dtype)
    tl.store(ptrs, h, mask=n_ok[None, :])
    if HANDOFF:
        store_handoff(h, weight, n, n_ok, pid, scaled_ptr, part_ptr)
