"""The decode step's last kernel: a row's logits widened to fp32 and their greedy argmax, one launch.

Shapes: logits [rows, vocab] (the lm_head's output: bf16 / fp16, or fp32 already), rows
contiguous -> (fp32 logits [rows, vocab], token ids [rows] int64).

Why a kernel of its own: after the lm_head a CUDA graph step ran `.float()` (a copy kernel) and
`sampling.sampler`'s two-level argmax in torch (a max per chunk, an argmax of the chunk maxima, a
gather and an add: five kernels); on an H100 those six kernels took about 18 us of W1's 1.25 ms
step (bench/results/2026-12-07-fixed-kernels, call 8's kernel table). Here one launch reads each
logit once: program (row, c) widens and stores chunk c of the row and writes the chunk's maximum
and its first index; the row's last program to arrive (an arrival counter a row, set back to 0 by
that program, so a CUDA graph replays it as it is) picks the first chunk holding the row's
maximum.

Invariants: ids equal `torch.argmax` of the fp32 logits, ties to the lowest token id (each level
keeps its first maximum); a NaN counts as the largest logit, as in `torch.argmax`; the widened
logits are the input's values exactly (fp32 input: no copy, the input is returned).
"""

from __future__ import annotations

import torch

from kvspill.kernels.pdl import pdl_meta, pdl_wait
from kvspill.kernels.triton_compat import tl, triton

CHUNK = 1024  # logits a program: 126 programs a row for a 128K vocabulary


@triton.jit
def _widen_argmax_kernel(
    logits_ptr,
    wide_ptr,
    part_max_ptr,  # [rows, num_chunks] fp32: each chunk's maximum
    part_arg_ptr,  # [rows, num_chunks] int32: its first index
    counter_ptr,  # [rows] int32, 0 between launches
    ids_ptr,
    vocab,
    num_chunks,
    CHUNK: tl.constexpr,
    CHUNKS_PAD: tl.constexpr,
    WIDEN: tl.constexpr,
    PDL: tl.constexpr = False,
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    pdl_wait(PDL)  # the logits come from the kernel before
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    ok = cols < vocab
    x = tl.load(logits_ptr + row.to(tl.int64) * vocab + cols, mask=ok, other=float("-inf")).to(tl.float32)
    if WIDEN:
        tl.store(wide_ptr + row.to(tl.int64) * vocab + cols, x, mask=ok)
    x = tl.where(x != x, float("inf"), x)  # NaN wins, as in torch.argmax (only +inf ties with it)
    best, arg = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
    part = row * num_chunks + chunk
    tl.store(part_max_ptr + part, best)
    tl.store(part_arg_ptr + part, chunk * CHUNK + arg)
    # Every thread's stores before thread 0's atomic, whose release publishes them; the last
    # program's acquire reaches its threads through Triton's broadcast of the atomic's result.
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr + row, 1, sem="acq_rel", scope="gpu")
    if arrived == num_chunks - 1:
        k = tl.arange(0, CHUNKS_PAD)
        maxima = tl.load(
            part_max_ptr + row * num_chunks + k,
            mask=k < num_chunks,
            other=float("-inf"),
            cache_modifier=".cg",
        )
        _, first = tl.max(maxima, axis=0, return_indices=True, return_indices_tie_break_left=True)
        token = tl.load(part_arg_ptr + row * num_chunks + first, cache_modifier=".cg")
        tl.store(ids_ptr + row, token.to(tl.int64))
        tl.store(counter_ptr + row, 0)


def widen_and_argmax(
    logits: torch.Tensor, counters: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits as fp32, their argmax a row as int64). `counters`: int32 [>= rows], all 0, that
    the launch leaves 0 (a CUDA graph's static buffer); None allocates zeroed ones."""
    assert logits.dim() == 2 and logits.is_contiguous(), (tuple(logits.shape), logits.stride())
    rows, vocab = logits.shape
    widen = logits.dtype != torch.float32
    wide = torch.empty((rows, vocab), dtype=torch.float32, device=logits.device) if widen else logits
    ids = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return wide, ids
    num_chunks = triton.cdiv(vocab, CHUNK)
    part_max = torch.empty((rows, num_chunks), dtype=torch.float32, device=logits.device)
    part_arg = torch.empty((rows, num_chunks), dtype=torch.int32, device=logits.device)
    if counters is None:
        counters = torch.zeros(rows, dtype=torch.int32, device=logits.device)
    assert counters.dtype == torch.int32 and counters.numel() >= rows, (counters.dtype, rows)
    _widen_argmax_kernel[(rows, num_chunks)](
        logits,
        wide,
        part_max,
        part_arg,
        counters,
        ids,
        vocab,
        num_chunks,
        CHUNK=CHUNK,
        CHUNKS_PAD=triton.next_power_of_2(num_chunks),
        WIDEN=widen,
        num_warps=4,
        **pdl_meta(logits.device),
    )
    return wide, ids
