"""Gather per-layer KV blocks from the pinned cpu pool straight into device memory (zero-copy).

A GPU kernel reads pinned host memory in place through unified virtual addressing (Triton
accepts a pinned host tensor: the driver maps it). DESIGN.md's physics measured 50.6 GB/s for
scattered 4 KiB chunks this way. For the stream path of cold attention (`cold_stream.py`) on the
Llama-3.1-8B shape (64 KiB per block and layer, 32K cold tokens, H200 host), a host gather into
pinned staging plus one H2D copy attended 3-4 GB/s of cold KV; this kernel, 38-42 GB/s.

Shapes:
    src: [num_src_blocks, *block]   a pool's layer view (pinned host memory; strided in dim 0,
                                     each block's elements contiguous)
    ids: [n] int64                   source block ids (on the kernel's device)
    dst: [>= n, *block]              contiguous destination; dst[i] = src[ids[i]]

Invariants: blocks are copied whole, bytes unchanged; the kernel only reads `src`.
"""

from __future__ import annotations

import functools
import math

import torch

from kvspill.kernels.triton_compat import tl, triton

# Elements a program copies per loop step: 32 KiB of bf16 in flight per program, so a small grid
# (a quarter of the SMs) keeps PCIe busy (50.6 GB/s, as many programs as pieces reached 50.2).
# A grid of one program per 4,096 elements (the first form) filled every SM while its loads
# waited on PCIe: a GEMV on another stream then ran after it, not beside it (13.4 + 6.4 ms took
# 19.6 ms; with 16-32 looping programs 13.6 ms). The cold stream path overlaps its copies with
# the model's kernels: a W3 128K fp8 KV stream graph with its copies on a second stream went from
# 27.95 tok/s (the first form) to 38.27 (64 looping programs; H200, 2026-11-27,
# bench/results/2026-11-27-h200-stream-graphs/).
_CHUNK = 16384
_INTERPRETER_CHUNK = 64  # tests: several pieces per block


def gather_blocks_ref(src: torch.Tensor, ids: torch.Tensor, dst: torch.Tensor) -> None:
    """Torch reference: dst[:n] = src[ids] (through the host when src is a host tensor)."""
    n = ids.shape[0]
    dst[:n].copy_(src.index_select(0, ids.to(src.device)))


@triton.jit
def _gather_loop_kernel(
    src_ptr,
    ids_ptr,
    slots_ptr,
    dst_ptr,
    stride_src,
    stride_dst,
    total,
    BLOCK_ELEMS: tl.constexpr,
    CHUNK: tl.constexpr,
    HAS_SLOTS: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
):
    # Grid: (NUM_PROGRAMS,); program p copies pieces p, p + NUM_PROGRAMS, ... of the n * pieces
    # per block (`total`): CHUNK elements of block ids[i] into dst[i], or with HAS_SLOTS into
    # dst[slots[i]] (a negative slot copies nothing).
    pieces: tl.constexpr = (BLOCK_ELEMS + CHUNK - 1) // CHUNK
    for w in range(tl.program_id(0), total, NUM_PROGRAMS):
        i = w // pieces
        offs = (w % pieces) * CHUNK + tl.arange(0, CHUNK)
        block_id = tl.load(ids_ptr + i).to(tl.int64)
        if HAS_SLOTS:
            slot = tl.load(slots_ptr + i).to(tl.int64)
            mask = offs < tl.where(slot >= 0, BLOCK_ELEMS, 0)
        else:
            slot = i.to(tl.int64)
            mask = offs < BLOCK_ELEMS
        x = tl.load(src_ptr + block_id * stride_src + offs, mask=mask)
        tl.store(dst_ptr + slot * stride_dst + offs, x, mask=mask)


def _check(src: torch.Tensor, ids: torch.Tensor, dst: torch.Tensor) -> None:
    assert src.shape[1:] == dst.shape[1:] and src.dtype == dst.dtype, (
        f"src {src.dtype} {tuple(src.shape)} and dst {dst.dtype} {tuple(dst.shape)} blocks differ"
    )
    assert src[0].is_contiguous() and dst.is_contiguous(), "each block must be contiguous"
    assert ids.dtype == torch.int64 and ids.device == dst.device
    # (not while a CUDA graph records: the check asks the driver about the pointer)
    if dst.is_cuda and not torch.cuda.is_current_stream_capturing():
        assert src.is_pinned() or src.is_cuda, "the GPU reads host memory in place only when it is pinned"


@functools.cache
def _num_programs(device: torch.device) -> int:
    """The gather's grid: a quarter of the SMs (at least 16) on CUDA; 3 in the interpreter (tests
    then run the loop over several pieces per program)."""
    if device.type != "cuda":
        return 3
    return max(16, torch.cuda.get_device_properties(device).multi_processor_count // 4)


def _launch(src: torch.Tensor, ids: torch.Tensor, slots: torch.Tensor | None, dst: torch.Tensor) -> None:
    n = ids.shape[0]
    if n == 0:
        return
    block_elems = math.prod(src.shape[1:])
    chunk = _CHUNK if dst.is_cuda else _INTERPRETER_CHUNK
    total = n * triton.cdiv(block_elems, chunk)
    programs = min(_num_programs(dst.device), total)
    _gather_loop_kernel[(programs,)](
        src,
        ids,
        ids if slots is None else slots,  # unread without slots
        dst,
        src.stride(0),
        dst.stride(0),
        total,
        BLOCK_ELEMS=block_elems,
        CHUNK=chunk,
        HAS_SLOTS=slots is not None,
        NUM_PROGRAMS=programs,
        num_warps=4,
    )


def index_copy_rows(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> None:
    """dst.index_copy_(0, index, src) for any KV dtype: one-byte float formats (fp8) go as bytes,
    since torch's CPU index_copy_ has no float8 kernel (same bits, same result)."""
    if dst.element_size() == 1 and dst.is_floating_point():
        dst, src = dst.view(torch.uint8), src.view(torch.uint8)
    dst.index_copy_(0, index, src)


def gather_blocks(src: torch.Tensor, ids: torch.Tensor, dst: torch.Tensor) -> None:
    """Triton wrapper; on CUDA `src` must be pinned (read in place), `ids` and `dst` on the GPU."""
    _check(src, ids, dst)
    assert ids.shape[0] <= dst.shape[0]
    _launch(src, ids, None, dst)


def gather_blocks_to(
    src: torch.Tensor,
    ids: torch.Tensor,
    slots: torch.Tensor,
    dst: torch.Tensor,
    use_kernel: bool | None = None,
) -> None:
    """dst[slots[i]] = src[ids[i]] for every i with slots[i] >= 0 (`ids`, `slots`: int64, on dst's
    device; the count of real copies stays on the device: no host sync). The kernel runs on CUDA
    (`src` pinned, read in place) or when asked (tests: the interpreter); otherwise a torch copy."""
    _check(src, ids, dst)
    assert ids.shape == slots.shape and slots.dtype == torch.int64
    if not (dst.is_cuda if use_kernel is None else use_kernel):
        keep = slots >= 0
        index_copy_rows(dst, slots[keep], src.index_select(0, ids[keep].to(src.device)).to(dst.device))
        return
    _launch(src, ids, slots, dst)
