"""Triton kernels of sparse attention's block selection: `attention/sparse/select.select_from_keys` in two
launches and one fill, with no sort.

The selection (see `attention/sparse/select.py`): each kv head ranks the cold blocks by its ranking key
(`kernels/sparse_kernels.block_keys`: distinct int64, larger first), a block's priority is its
best rank over the heads, and the `budget` blocks of least (priority, block index) are kept, in
ascending block order. With torch this took two top-k's, a sort and four small kernels per layer
and step: 140 us per layer of a 23 ms W3 128K step on an H200 (2026-11-27 profile, 4.5 ms per
token), most of it in radix passes over 64-bit keys.

1. `_head_top_kernel`, one program per kv head: the head's `budget`-th largest score by a 20-step
   bitwise search (scores rank by their top 20 bits, `sparse_kernels.SCORE_BITS`; one count per
   step: settling more bits a step was compute-bound, 3-4x slower) on the keys' high halves
   (counts of `>=` over the head's blocks, held in registers up to `_REGISTER_BLOCKS` blocks), ties on the score taken by lower
   block index (the keys' low halves order them so); the chosen keys are compacted in block
   order, each one's rank in the head is the number of chosen keys above it (pairwise; past
   `_PAIRWISE_RANK_MAX`, its place after a bitonic sort), and an atomic min writes the code
   `rank * kv_heads + head` into `best[block]` (filled with `budget * kv_heads` before: "in no
   head's list"). Past `_REGISTER_BLOCKS` blocks `_chunk_top_kernel` first keeps each chunk's
   top keys (the head's are among them).
2. `_union_kernel`, one program: the least rank `r` with `count(rank(best) <= r) >= budget` by
   a bitwise search over the codes in registers, the blocks of rank below `r` plus the
   lowest-index ones at `r`, compacted in block order: the output is ascending by construction.
   Past `_REGISTER_BLOCKS` blocks `_union_entries_kernel` does the same from the heads' chosen
   entries (kv_heads x budget), ordered by a sort.

Deterministic: no float reduction and no order-dependent atomics (min is commutative).
"""

from __future__ import annotations

import torch

from kvspill.kernels.sparse_kernels import SCORE_BITS
from kvspill.kernels.triton_compat import tl, triton

# Up to this many blocks per head (4096 = 64K tokens of 16) the search keeps a head's scores in
# registers; past it chunks of this many first keep their top keys, in parallel. On an H200 under
# CUDA graphs (budget 256, 8 kv heads, 2026-11-29): 5,545 blocks (W3 128K) 38.9 us with 4096,
# 41.1 with 8192, 36.9 with 2048; 62,000 blocks (W1 1M) 45.9, 49.6 and 69.7.
_REGISTER_BLOCKS = 4096
# Up to this many chosen blocks a head's ranks come from pairwise comparisons of its chosen keys;
# past it, from a bitonic sort of them (on an H200, 8192 blocks and a budget of 1024: 189 us for
# the whole selection with pairwise ranks, 45 with sorted ones; 46 at a budget of 256, pairwise).
_PAIRWISE_RANK_MAX = 512
_LOWEST_SCORE_BIT = tl.constexpr(32 - SCORE_BITS)
# (The kernels spell int64's least value, -9223372036854775808, as a literal: a compiled Triton
# kernel reads no module globals but constexpr ones.)


@triton.jit
def _high(key):
    """A ranking key's high half (the score's order-preserving bits) as int32."""
    return (key >> 32).to(tl.int32)


@triton.jit
def _block_of(key, n):
    """The block a ranking key names: its low half is n - 1 - block."""
    return n - 1 - (key - ((key >> 32) << 32))


@triton.jit
def _count_ge(row_ptr, n, t, NP: tl.constexpr, SINGLE: tl.constexpr, hi_regs, GT: tl.constexpr):
    """How many of the row's n keys have a high half >= t (> t with GT; t int32)."""
    if SINGLE:
        if GT:
            return tl.sum((hi_regs > t).to(tl.int32), axis=0)
        return tl.sum((hi_regs >= t).to(tl.int32), axis=0)
    count = tl.zeros([], tl.int32)
    for start in range(0, n, NP):
        offs = start + tl.arange(0, NP)
        hi = _high(tl.load(row_ptr + offs, mask=offs < n, other=-9223372036854775808))
        if GT:
            count += tl.sum((hi > t).to(tl.int32), axis=0)
        else:
            count += tl.sum((hi >= t).to(tl.int32), axis=0)
    return count


@triton.jit
def _next_bit(t, bit: tl.constexpr):
    """t + 2**bit in int32: the search sets each bit once from -2**31, so it stays in range."""
    return (t.to(tl.int64) + (1 << bit)).to(tl.int32)


@triton.jit
def _search_high(row_ptr, m, k, NP: tl.constexpr, SINGLE: tl.constexpr, hi_regs):
    """The k-th largest high half of the row's m keys: the largest t with count(hi >= t) >= k,
    set bit by bit from -2**31. High halves keep only their top SCORE_BITS bits
    (`sparse_kernels.score_bits`), so the bits below are 0 in t too: not searched."""
    t = tl.full([], -2147483648, tl.int32)
    for bit in tl.static_range(31, _LOWEST_SCORE_BIT - 1, -1):
        cand = _next_bit(t, bit)
        count = _count_ge(row_ptr, m, cand, NP, SINGLE, hi_regs, False)
        t = tl.where(count >= k, cand, t)
    return t


@triton.jit
def _compact_top(row_ptr, dst_ptr, m, k, t, NP: tl.constexpr, SINGLE: tl.constexpr, hi_regs):
    """Store at dst, in block order, the row's k keys of greatest high half (t from
    `_search_high`): all above t, and the first ties at t."""
    need = k - _count_ge(row_ptr, m, t, NP, SINGLE, hi_regs, True)
    ties_seen = tl.zeros([], tl.int32)
    kept = tl.zeros([], tl.int32)
    for start in range(0, m, NP):
        offs = start + tl.arange(0, NP)
        in_m = offs < m
        key = tl.load(row_ptr + offs, mask=in_m, other=-9223372036854775808)
        hi = _high(key)
        tie = (in_m & (hi == t)).to(tl.int32)
        keep = in_m & ((hi > t) | ((tie > 0) & (ties_seen + tl.cumsum(tie, axis=0) <= need)))
        tl.store(dst_ptr + kept + tl.cumsum(keep.to(tl.int32), axis=0) - 1, key, mask=keep)
        ties_seen += tl.sum(tie, axis=0)
        kept += tl.sum(keep.to(tl.int32), axis=0)


@triton.jit
def _chunk_top_kernel(
    keys_ptr,  # [KVH, n] int64 ranking keys
    cand_ptr,  # [KVH, num_chunks * budget] int64 out: each chunk's top keys in block order
    n,
    budget,
    NP: tl.constexpr,  # blocks per chunk (a power of two)
    BP: tl.constexpr,  # next power of two >= budget
):
    """A head's top `budget` keys are among its chunks' top `budget` keys: this program keeps
    those of one chunk (all of a short last chunk, then least keys as filler)."""
    h = tl.program_id(0)
    c = tl.program_id(1)
    start = c * NP
    offs = tl.arange(0, NP)
    n_here = tl.minimum(n - start, NP)
    k_here = tl.minimum(n_here, budget)
    row = keys_ptr + h.to(tl.int64) * n + start
    hi = _high(tl.load(row + offs, mask=offs < n_here, other=-9223372036854775808))
    t = _search_high(row, n_here, k_here, NP, True, hi)
    out = cand_ptr + (h.to(tl.int64) * tl.num_programs(1) + c) * budget
    _compact_top(row, out, n_here, k_here, t, NP, True, hi)
    fill = tl.arange(0, BP)
    tl.store(
        out + fill, tl.full([BP], -9223372036854775808, tl.int64), mask=(fill >= k_here) & (fill < budget)
    )


@triton.jit
def _head_top_kernel(
    keys_ptr,  # [KVH, m] int64 ranking keys (all of a head's, or its chunks' top ones)
    best_ptr,  # [n] int32, `budget * KVH` on entry; out: least code rank * KVH + head of each block
    top_ptr,  # [KVH, BP] int64 out: each head's chosen keys (block order, or by rank with RANK_BY_SORT)
    rank_ptr,  # [KVH, BP] int32 out: the rank in its head of each key of top_ptr
    n,  # blocks: the keys' low halves are n - 1 - block
    m,
    budget,
    NP: tl.constexpr,  # power of two: a head's blocks (SINGLE) or the chunk of the others
    BP: tl.constexpr,  # next power of two >= budget
    RB: tl.constexpr,  # rows per step of the pairwise ranks
    SINGLE: tl.constexpr,
    RANK_BY_SORT: tl.constexpr,
):
    h = tl.program_id(0)
    kvh = tl.num_programs(0)
    row = keys_ptr + h.to(tl.int64) * m
    offs0 = tl.arange(0, NP)
    hi_regs = offs0  # placeholder when not SINGLE (never read)
    if SINGLE:
        key0 = tl.load(row + offs0, mask=offs0 < m, other=-9223372036854775808)
        hi_regs = _high(key0)
    t = _search_high(row, m, budget, NP, SINGLE, hi_regs)
    _compact_top(row, top_ptr + h * BP, m, budget, t, NP, SINGLE, hi_regs)
    tl.debug_barrier()  # the compacted keys, written by every thread, are read by every thread
    cols = tl.arange(0, BP)
    all_top = tl.load(top_ptr + h * BP + cols, mask=cols < budget, other=-9223372036854775808)
    if RANK_BY_SORT:  # place after a descending sort = rank in the head (keys are distinct)
        ranked = tl.sort(all_top, descending=True)
        tl.atomic_min(best_ptr + _block_of(ranked, n), cols * kvh + h, mask=cols < budget)
        tl.debug_barrier()  # every thread has read top_ptr before any overwrites it
        tl.store(top_ptr + h * BP + cols, ranked, mask=cols < budget)
        tl.store(rank_ptr + h * BP + cols, cols, mask=cols < budget)
    else:  # rank = how many chosen keys are greater
        for r0 in range(0, budget, RB):
            rows = r0 + tl.arange(0, RB)
            in_b = rows < budget
            mine = tl.load(top_ptr + h * BP + rows, mask=in_b, other=-9223372036854775808)
            rank = tl.sum((all_top[None, :] > mine[:, None]).to(tl.int32), axis=1)
            tl.atomic_min(best_ptr + _block_of(mine, n), rank * kvh + h, mask=in_b)
            tl.store(rank_ptr + h * BP + rows, rank, mask=in_b)


@triton.jit
def _union_kernel(
    best_ptr,  # [n] int32 least code rank * kvh + head of each block (budget * kvh: in no head's list)
    out_ptr,  # [budget] int64: the chosen blocks, ascending
    n,
    budget,
    kvh,
    NP: tl.constexpr,  # next power of two >= n (at most _REGISTER_BLOCKS: the codes stay in registers)
    LOG_BP: tl.constexpr,  # 2 ** (LOG_BP + 1) > budget
):
    offs0 = tl.arange(0, NP)
    best_regs = tl.load(best_ptr + offs0, mask=offs0 < n, other=2147483647)
    # the least rank r with count(rank <= r) >= budget (rank <= r: code <= r * kvh + kvh - 1);
    # r_below is the largest r with fewer
    r_below = tl.full([], -1, tl.int32)
    for bit in tl.static_range(LOG_BP, -1, -1):
        cand = r_below + (1 << bit)
        count = tl.sum((best_regs <= cand * kvh + kvh - 1).to(tl.int32), axis=0)
        r_below = tl.where(count < budget, cand, r_below)
    below = r_below * kvh + kvh - 1  # codes of ranks below r
    at_r = below + kvh  # codes of ranks up to r
    need = budget - tl.sum((best_regs <= below).to(tl.int32), axis=0)
    tie = ((best_regs > below) & (best_regs <= at_r)).to(tl.int32)  # padding's code is int32 max
    chosen = (best_regs <= below) | ((tie > 0) & (tl.cumsum(tie, axis=0) <= need))
    slot = tl.cumsum(chosen.to(tl.int32), axis=0) - 1
    tl.store(out_ptr + slot, offs0.to(tl.int64), mask=chosen)


@triton.jit
def _union_entries_kernel(
    best_ptr,  # [n] int32 codes as in _union_kernel
    top_ptr,  # [KVH, BP] int64 each head's chosen keys (`_head_top_kernel`)
    rank_ptr,  # [KVH, BP] int32 their ranks in the head
    out_ptr,  # [budget] int64: the chosen blocks, ascending
    n,
    budget,
    kvh,
    KVH: tl.constexpr,  # next power of two >= kvh
    BP: tl.constexpr,
    LOG_BP: tl.constexpr,
):
    """`_union_kernel`'s result from the heads' kvh x budget chosen entries instead of n blocks
    (1M tokens: 65,536 blocks). The entry (head h, rank r) is its block's representative when
    best[block] == r * kvh + h: one per block. The budget's least
    ranks over the representatives are searched in registers; at the last rank r each head has
    at most one entry, so its ties are ordered by pairwise block comparisons over kvh entries.
    The chosen blocks are compacted, then sorted (budget of them): on an H200 a compaction over
    all n blocks took 44 us at 65,536 blocks, a sort of all kvh x budget entries 38 us."""
    heads = tl.arange(0, KVH)[:, None]
    cols = tl.arange(0, BP)[None, :]
    valid = (cols < budget) & (heads < kvh)
    key = tl.load(top_ptr + heads * BP + cols, mask=valid, other=0)
    block = _block_of(key, n)
    rank = tl.load(rank_ptr + heads * BP + cols, mask=valid, other=2147483647)
    code = tl.load(best_ptr + block, mask=valid, other=-1)
    rep = valid & (code == rank * kvh + heads)
    r_below = tl.full([], -1, tl.int32)
    for bit in tl.static_range(LOG_BP, -1, -1):
        cand = r_below + (1 << bit)
        count = tl.sum(tl.sum((rep & (rank <= cand)).to(tl.int32), axis=1), axis=0)
        r_below = tl.where(count < budget, cand, r_below)
    r = r_below + 1
    need = budget - tl.sum(tl.sum((rep & (rank <= r_below)).to(tl.int32), axis=1), axis=0)
    tie = rep & (rank == r)
    tie_block = tl.sum(tl.where(tie, block, 0), axis=1)  # [KVH]: the head's tied block, if any
    has_tie = tl.sum(tie.to(tl.int32), axis=1) > 0
    lower = tl.sum((has_tie[None, :] & (tie_block[None, :] < tie_block[:, None])).to(tl.int32), axis=1)
    take = tie & (has_tie & (lower < need))[:, None]
    chosen = (rep & (rank < r)) | take  # exactly `budget` entries
    # ascending: the chosen blocks compacted into out (any order), then sorted there
    flat = tl.reshape(chosen.to(tl.int32), [KVH * BP])
    slot = tl.reshape(tl.cumsum(flat, axis=0) - 1, [KVH, BP])
    tl.store(out_ptr + slot, block, mask=chosen)
    tl.debug_barrier()  # the blocks, stored by every thread, are read by every thread
    keep = tl.arange(0, BP)
    blocks = tl.load(out_ptr + keep, mask=keep < budget, other=9223372036854775807)
    tl.debug_barrier()  # every thread has read out before any overwrites it
    tl.store(out_ptr + keep, tl.sort(blocks), mask=keep < budget)


def select_top_blocks(
    keys: torch.Tensor, budget_blocks: int, register_blocks: int = _REGISTER_BLOCKS
) -> torch.Tensor:
    """The `budget_blocks` chosen blocks (int64, ascending) of ranking keys [num_kv_heads, n]:
    `select_from_keys`' result, for 1 <= budget_blocks < n. `register_blocks` (a power of two):
    the most blocks a program keeps in registers (tests lower it to run the other paths)."""
    num_kv_heads, n = keys.shape
    assert 1 <= budget_blocks < n < 2**31 and keys.dtype == torch.int64 and keys.is_contiguous()
    bp = triton.next_power_of_2(budget_blocks)
    rows = keys
    num_chunks = triton.cdiv(n, register_blocks)
    if num_chunks > 1 and num_chunks * budget_blocks < n:  # first each chunk's top keys
        rows = torch.empty((num_kv_heads, num_chunks * budget_blocks), dtype=torch.int64, device=keys.device)
        _chunk_top_kernel[(num_kv_heads, num_chunks)](
            keys, rows, n, budget_blocks, NP=register_blocks, BP=bp, num_warps=_warps(register_blocks)
        )
    m = rows.shape[1]
    single = m <= register_blocks
    np_ = triton.next_power_of_2(m) if single else register_blocks
    best = torch.full((n,), budget_blocks * num_kv_heads, dtype=torch.int32, device=keys.device)
    top = torch.empty((num_kv_heads, bp), dtype=torch.int64, device=keys.device)
    ranks = torch.empty((num_kv_heads, bp), dtype=torch.int32, device=keys.device)
    out = torch.empty(budget_blocks, dtype=torch.int64, device=keys.device)
    _head_top_kernel[(num_kv_heads,)](
        rows, best, top, ranks, n, m, budget_blocks, NP=np_, BP=bp, RB=max(1, min(32, 8192 // bp)),
        SINGLE=single, RANK_BY_SORT=budget_blocks > _PAIRWISE_RANK_MAX, num_warps=_warps(max(np_, bp)),
    )  # fmt: skip
    if n <= register_blocks:  # the codes in registers
        np_ = triton.next_power_of_2(n)
        _union_kernel[(1,)](
            best,
            out,
            n,
            budget_blocks,
            num_kv_heads,
            NP=np_,
            LOG_BP=bp.bit_length() - 1,
            num_warps=_warps(np_),
        )
    else:
        _union_entries_kernel[(1,)](
            best, top, ranks, out, n, budget_blocks, num_kv_heads, KVH=triton.next_power_of_2(num_kv_heads), BP=bp,
            LOG_BP=bp.bit_length() - 1, num_warps=_warps(triton.next_power_of_2(num_kv_heads) * bp),
        )  # fmt: skip
    return out


def _warps(np_: int) -> int:
    return 8 if np_ >= 4096 else 4
