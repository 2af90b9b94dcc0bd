"""Triton kernels of sparse cold attention's per-layer selection (`attention/cold/sparse.py`).

1. `block_keys`: the score of every cold block of one sequence for each kv head
   (`attention/sparse/select.block_scores`: q . center + ||q * half-width||_2 of the block's key box),
   read from the summaries where they lie (cpu- and disk-tier summary tensors, no gather copy),
   written as int64 *ranking keys*: the score's top `SCORE_BITS` bits made order-preserving in
   the high 32 bits (`score_bits`), and `n - 1 - block` in the low 32. Sorting keys descending
   is sorting by score, ties by lower block index first: exactly the order
   `attention/sparse/select.select_blocks` defines, so a top-k of keys (all distinct) is deterministic
   and equals the stable argsort of the reference.
2. `cache_update`: the bookkeeping of `attention/sparse/cache.py` for one sequence and layer in one
   program: which chosen blocks are already in the GPU cache (hits), which slots hold blocks no
   longer chosen (free), the r-th miss goes to the r-th free slot (ascending); it updates the
   maps and returns each chosen block's slot and, for misses, the slot to copy into.

Both replace a chain of ~25 small torch launches per layer (the host was the bottleneck of a
sparse decode step: 44 ms of host ops against 27 ms of GPU work per step, W3 128K on an H100).
Torch references with the same semantics live elsewhere (`attention/sparse/select.block_scores_ref` with
`ranking_keys`, `attention/sparse/cache.cache_update_ref`); off CUDA the references run.
"""

from __future__ import annotations

import torch

from kvspill.kernels.triton_compat import tl, triton
from kvspill.types import TIER_CPU

_BLOCKS_PER_PROGRAM = 32
# Scores rank by their top SCORE_BITS bits (sign, exponent, 11 mantissa bits: 2^-11 relative):
# scores closer than that tie, and ties go to the lower block index. The summaries and queries
# are bf16 (8 mantissa bits) on the GPU, so finer differences are noise, and the selection's
# bitwise searches (kernels/block_select.py) take 20 steps instead of 32.
SCORE_BITS = 20
_SCORE_MASK = -(1 << (32 - SCORE_BITS))  # int32 with the top SCORE_BITS bits set


def score_bits(score: torch.Tensor) -> torch.Tensor:
    """fp32 -> int32 whose signed order is the float order at SCORE_BITS bits (-0.0 first made
    +0.0): the ranking keys' high half and the order `attention/sparse/select.select_blocks` defines."""
    bits = (score.float() + 0.0).view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits) & _SCORE_MASK


def ranking_keys(scores: torch.Tensor) -> torch.Tensor:
    """[num_kv_heads, n] float scores -> int64 keys (see the module docstring)."""
    n = scores.shape[1]
    low = (n - 1 - torch.arange(n, device=scores.device, dtype=torch.int64)).expand_as(scores)
    return (score_bits(scores).to(torch.int64) << 32) | low


def pad_keys(keys: torch.Tensor, num_valid: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Reference of `block_keys`' padding: blocks at `positions` >= `num_valid` get the least high
    half (int32 min), keeping their low half, so they rank below every real block."""
    low = keys & 0xFFFFFFFF
    return torch.where(positions < num_valid, keys, low - 2**63)


@triton.jit
def _block_keys_kernel(
    q_ptr,  # [num_heads, D] this row's queries
    cpu_ptr,  # cpu-tier summaries of this layer: [blocks, 2, KVH, D] with block stride `stride_b`
    disk_ptr,  # disk-tier summaries (same layout; the cpu view again when there is no disk tier)
    tiers_ptr,  # [n] int64 tier of each cold block
    ids_ptr,  # [n] int64 id within its tier
    out_ptr,  # [KVH, n] int64 keys
    count_ptr,  # int64 scalar: blocks past it are padding (HAS_COUNT)
    n,
    stride_b,
    KVH: tl.constexpr,
    GROUP: tl.constexpr,
    D: tl.constexpr,
    BN: tl.constexpr,
    CPU_TIER: tl.constexpr,
    HAS_COUNT: tl.constexpr,
    SCORE_MASK: tl.constexpr,
):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    offs = pid * BN + tl.arange(0, BN)
    in_n = offs < n
    valid = in_n
    if HAS_COUNT:
        valid = in_n & (offs < tl.load(count_ptr))
    tier = tl.load(tiers_ptr + offs, mask=valid, other=CPU_TIER)
    bid = tl.load(ids_ptr + offs, mask=valid, other=0).to(tl.int64)
    d = tl.arange(0, D)
    base = bid[:, None] * stride_b + h * D + d[None, :]
    on_cpu = (valid & (tier == CPU_TIER))[:, None]
    on_disk = (valid & (tier != CPU_TIER))[:, None]
    kmin = tl.load(cpu_ptr + base, mask=on_cpu, other=0.0).to(tl.float32) + tl.load(
        disk_ptr + base, mask=on_disk, other=0.0
    ).to(tl.float32)
    kmax = tl.load(cpu_ptr + base + KVH * D, mask=on_cpu, other=0.0).to(tl.float32) + tl.load(
        disk_ptr + base + KVH * D, mask=on_disk, other=0.0
    ).to(tl.float32)
    center = (kmax + kmin) * 0.5
    half_sq = (kmax - kmin) * (kmax - kmin) * 0.25
    best = tl.full([BN], float("-inf"), tl.float32)
    for g in tl.static_range(GROUP):
        qg = tl.load(q_ptr + (h * GROUP + g) * D + d).to(tl.float32)
        spread = tl.sqrt(tl.sum(half_sq * (qg * qg)[None, :], axis=1))
        best = tl.maximum(best, tl.sum(center * qg[None, :], axis=1) + spread)
    bits = (best + 0.0).to(tl.int32, bitcast=True)
    bits = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits) & SCORE_MASK
    # Padding's high half is the least int32; a real score's is at least -NaN's (0x803FFFFF).
    bits = tl.where(valid, bits, -2147483648)
    key = (bits.to(tl.int64) << 32) | (n - 1 - offs).to(tl.int64)
    tl.store(out_ptr + h * n + offs, key, mask=in_n)


def block_keys(
    q: torch.Tensor,
    cpu_summary: torch.Tensor,
    disk_summary: torch.Tensor | None,
    tiers: torch.Tensor,
    ids: torch.Tensor,
    num_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Ranking keys [num_kv_heads, n] of one query row `q` [num_heads, D] over the n cold blocks
    (`tiers`, `ids`: int64 on the device) whose summaries are the layer views given.
    `num_valid` (int64 scalar on the device; CUDA graphs, whose shapes are fixed): only the first
    that many blocks are real; the rest are padding, read nowhere, with keys below every real
    block's (so a top-k of at most `num_valid` never picks one)."""
    num_heads, head_dim = q.shape
    _, two, num_kv_heads, summary_dim = cpu_summary.shape
    assert two == 2 and summary_dim == head_dim and cpu_summary[0].is_contiguous()
    disk = cpu_summary if disk_summary is None else disk_summary
    assert disk.stride(0) == cpu_summary.stride(0)
    n = ids.shape[0]
    out = torch.empty((num_kv_heads, n), dtype=torch.int64, device=q.device)
    if n == 0:
        return out
    grid = (triton.cdiv(n, _BLOCKS_PER_PROGRAM), num_kv_heads)
    _block_keys_kernel[grid](
        q.contiguous(),
        cpu_summary,
        disk,
        tiers,
        ids,
        out,
        num_valid if num_valid is not None else ids,
        n,
        cpu_summary.stride(0),
        KVH=num_kv_heads,
        GROUP=num_heads // num_kv_heads,
        D=head_dim,
        BN=_BLOCKS_PER_PROGRAM,
        CPU_TIER=TIER_CPU,
        HAS_COUNT=num_valid is not None,
        SCORE_MASK=_SCORE_MASK,
        num_warps=4,
    )
    return out


@triton.jit
def _cache_update_kernel(
    slot_of_ptr,  # [max_blocks] int32: slot of each logical block in the cache, -1 if none
    slot_block_ptr,  # [S] int64: logical block held by each slot, -1 if none
    pos_ptr,  # [k] int64: positions chosen this step in the sequence's cold list (distinct)
    logical_ptr,  # [num_cold] int64: each cold block's logical number (the cache's key)
    ids_ptr,  # [num_cold] int64: each cold block's id in its tier
    src_ids_ptr,  # [k] int64 out: ids[pos], where `fill` copies the misses from
    kept_ptr,  # [S] int32 scratch
    free_ptr,  # [S] int32 scratch
    table_ptr,  # [k] int32 out: slot (+ slot_base) of each chosen block
    copy_dst_ptr,  # [k] int64 out: slot (+ slot_base) to copy a miss into, -1 for hits
    copied_ptr,  # int64 scalar: += the number of misses
    k,
    num_slots,
    slot_base,
    KP: tl.constexpr,
    SP: tl.constexpr,
):
    i = tl.arange(0, KP)
    in_k = i < k
    pos = tl.load(pos_ptr + i, mask=in_k, other=0)
    chosen = tl.load(logical_ptr + pos, mask=in_k, other=0)
    tl.store(src_ids_ptr + i, tl.load(ids_ptr + pos, mask=in_k, other=0), mask=in_k)
    slot = tl.load(slot_of_ptr + chosen, mask=in_k, other=-1)
    hit = in_k & (slot >= 0)
    miss = in_k & (slot < 0)
    j = tl.arange(0, SP)
    in_s = j < num_slots
    tl.store(kept_ptr + j, tl.zeros([SP], tl.int32), mask=in_s)
    tl.debug_barrier()
    tl.store(kept_ptr + slot, tl.full([KP], 1, tl.int32), mask=hit)
    tl.debug_barrier()
    kept = tl.load(kept_ptr + j, mask=in_s, other=1)
    free = in_s & (kept == 0)
    free_rank = tl.cumsum(free.to(tl.int32), axis=0) - 1
    tl.store(free_ptr + free_rank, j, mask=free)
    tl.debug_barrier()
    miss_rank = tl.cumsum(miss.to(tl.int32), axis=0) - 1
    dst = tl.load(free_ptr + miss_rank, mask=miss, other=-1)
    old = tl.load(slot_block_ptr + dst, mask=miss, other=-1)
    tl.store(slot_of_ptr + old, tl.full([KP], -1, tl.int32), mask=miss & (old >= 0))
    tl.debug_barrier()
    tl.store(slot_of_ptr + chosen, dst, mask=miss)
    tl.store(slot_block_ptr + dst, chosen, mask=miss)
    final = tl.where(hit, slot, dst)
    tl.store(table_ptr + i, final + slot_base, mask=in_k)
    tl.store(copy_dst_ptr + i, tl.where(miss, dst + slot_base, -1).to(tl.int64), mask=in_k)
    tl.atomic_add(copied_ptr, tl.sum(miss.to(tl.int64), axis=0))


def cache_update(
    slot_of: torch.Tensor,
    slot_block: torch.Tensor,
    positions: torch.Tensor,
    logical: torch.Tensor,
    ids: torch.Tensor,
    scratch: torch.Tensor,
    slot_base: int,
    copied: torch.Tensor,
    table: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(table int32 [k], copy_dst int64 [k], src_ids int64 [k]) for the chosen blocks
    `logical[positions]`, whose tier ids are `ids[positions]` (= src_ids: the lookups happen in
    the kernel, two launches fewer per layer); updates `slot_of` and `slot_block` in place and
    adds the number of misses to `copied` (int64 scalar). `scratch`: int32 [2, S] on the device;
    `table`: where to write the table (contiguous [k])."""
    k = positions.shape[0]
    num_slots = slot_block.shape[0]
    assert k <= num_slots and scratch.shape == (2, num_slots)
    if table is None:
        table = torch.empty(k, dtype=torch.int32, device=positions.device)
    assert table.shape == (k,) and table.dtype == torch.int32 and table.is_contiguous()
    copy_dst = torch.empty(k, dtype=torch.int64, device=positions.device)
    src_ids = torch.empty_like(copy_dst)
    if k == 0:
        return table, copy_dst, src_ids
    _cache_update_kernel[(1,)](
        slot_of,
        slot_block,
        positions,
        logical,
        ids,
        src_ids,
        scratch[0],
        scratch[1],
        table,
        copy_dst,
        copied,
        k,
        num_slots,
        slot_base,
        KP=max(16, triton.next_power_of_2(k)),
        SP=max(16, triton.next_power_of_2(num_slots)),
        num_warps=4,
    )
    return table, copy_dst, src_ids
