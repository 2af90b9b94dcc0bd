"""Programmatic dependent launch (PDL) for the decode step's kernels (sm_90 and later).

Why: a batch-1 decode step is 200-350 kernels of 1-60 us. Between two of them HBM idles while the
next kernel launches and its first wave ramps up, and the small kernels (RMSNorm, SiLU, RoPE, the
attention merge) are almost all latency. A kernel launched with the PDL attribute may start while
the kernel before it is still running: it prefetches its weights into L2 (weights never depend on
the kernel before), then waits (`griddepcontrol.wait`: the previous kernel complete and its writes
visible) and lets the kernel after it launch (`griddepcontrol.launch_dependents`). CUDA graphs keep
these launches as programmatic edges.

The contract of a kernel that takes `PDL` (every caller passes `pdl_meta(device)`): nothing it
stores, and nothing it loads that the kernel launched just before it may write, before
`pdl_wait(PDL)`; `prefetch_l2` of read-only data (weights) may come first. Kernels with an `EARLY`
constexpr (`early_reads`) also read, before the wait, what is read-only (RMSNorm's weight) or what
their callers guarantee is older than the kernel before: decode attention in the runner's step
reads seq_lens, the block table, positions and cos/sin rows, the step's host copies and a table,
and asks L2 for its first keys' rows. When such a kernel starts, the kernel before has passed its
own wait, so everything launched before that one is complete. Waiting is transitive (the kernel before waited for its
own predecessor), so a kernel that follows a non-PDL launch, a copy or a torch kernel is ordered as
usual. Off: `KVSPILL_PDL=0`, on GPUs before sm_90, and under Triton's interpreter; then `PDL` is
False and the kernels compile without these instructions.
"""

from __future__ import annotations

import os
from functools import cache

import torch

from kvspill.env import switch_on
from kvspill.kernels.triton_compat import tl, triton

# How much of its weight rows a GEMV program asks L2 for before it waits (128-byte lines): 8 KB
# for a program of several warps, 4 KB for a one-warp (lane) program.
PREFETCH_LINES = tl.constexpr(64)
LANE_PREFETCH_LINES = tl.constexpr(32)


@cache
def _device_supports_pdl(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


def pdl_enabled(device: torch.device) -> bool:
    """Whether kernels on `device` launch with PDL (read per call: KVSPILL_PDL=0 switches it off)."""
    if device.type != "cuda" or not switch_on("PDL"):
        return False
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    return _device_supports_pdl(device.index if device.index is not None else torch.cuda.current_device())


def early_reads(device: torch.device) -> bool:
    """Whether kernels with an `EARLY` constexpr read what does not depend on the kernel before
    ahead of their PDL wait: with PDL, unless KVSPILL_EARLY_READS=0. On an H100 (random 8B
    Q4_K_M, 8K batch 1) the attention's reads took the step from 2.936-2.943 to 2.852-2.858 ms,
    W1's 8K step 1.4% and 32 x 2K's 0.8% less (bench/results/2026-12-05-h100-early-reads)."""
    return pdl_enabled(device) and switch_on("EARLY_READS")


def pdl_meta(device: torch.device) -> dict[str, bool]:
    """Launch keywords of a PDL-aware kernel: the kernel's `PDL` constexpr and Triton's
    `launch_pdl` option always agree (a PDL launch of a kernel without the wait would race)."""
    if pdl_enabled(device):
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """Wait for the previous kernel (complete, writes visible), then let the next one launch."""
    if PDL:
        tl.inline_asm_elementwise(
            "griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1
        )
        tl.inline_asm_elementwise(
            "griddepcontrol.launch_dependents; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1
        )


@triton.jit
def prefetch_l2(base, nbytes, PDL: tl.constexpr, LINES: tl.constexpr):
    """Ask L2 for the first min(nbytes, LINES * 128) bytes at `base` (a read-only range): one
    `prefetch.global.L2` a 128-byte line, addresses clamped to the range. Only with PDL: without
    it the kernel has no earlier kernel's time to hide the reads in."""
    if PDL:
        offsets = tl.minimum(tl.arange(0, LINES) * 128, tl.maximum(nbytes - 1, 0))
        prefetch_lines(base.to(tl.pointer_type(tl.int8)) + offsets)


@triton.jit
def prefetch_lines(byte_ptrs):
    """One `prefetch.global.L2` for the 128-byte line of each address in `byte_ptrs` (any shape,
    int8 pointers): a hint, nothing read into registers."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; // $0", "=r,l", [byte_ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def prefetch_rows_then_wait(
    w_ptr, first_row, rows, stride_w, BLOCK_N: tl.constexpr, PDL: tl.constexpr, LINES: tl.constexpr
):
    """A GEMV program's prologue: prefetch the start of its weight rows [first_row, first_row +
    BLOCK_N) (of `rows`, `stride_w` elements apart, read-only), then `pdl_wait`."""
    rows_here = tl.minimum(rows - first_row, BLOCK_N)
    elem_bytes: tl.constexpr = w_ptr.dtype.element_ty.primitive_bitwidth // 8
    prefetch_l2(w_ptr + first_row.to(tl.int64) * stride_w, rows_here * stride_w * elem_bytes, PDL, LINES)
    pdl_wait(PDL)
