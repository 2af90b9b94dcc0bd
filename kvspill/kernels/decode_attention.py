"""Decode attention over the paged KV cache: split-KV (FlashDecoding) Triton kernel.

Shapes:
    q:            [num_seqs, num_heads, head_dim]   one query per seq, at position seq_lens[s] - 1
    kv_layer:     [num_blocks, 2, block_size, num_kv_heads, row_dim]   a view of one layer
                  (row_dim = head_dim, or head_dim + 4 for int8 pools: kernels/kv_quant.py)
    block_tables: [num_seqs, max_blocks_per_seq] int32
    seq_lens:     [num_seqs] int32, keys attended (the query's own key included, already stored)
    o:            [num_seqs, num_heads, head_dim] in q's dtype
    lse:          [num_seqs, num_heads] float32, natural-log logsumexp of scale * q.k

Invariants:
- A seq with seq_len 0 gives o = 0 and lse = -inf (so it merges as "no keys").
- Every scratch shape depends only on (num_seqs, num_heads, num_splits, head_dim), never on
  seq_lens values, and the automatic num_splits reads only block_tables.shape: the wrapper
  launches the same kernels for any seq_lens and can be captured in a CUDA graph.
- Each stage-1 program reads the K/V of one KV head once for its whole GQA group of query heads.

Stage 1, grid (num_seqs, num_kv_heads, num_splits): split i of a seq covers keys
[i * T, min((i + 1) * T, seq_len)) with T = max(min_split_tokens, seq_len / num_splits rounded up
to BLOCK_N); programs whose range is empty write o = 0, lse = -inf. Stage 2, grid
(num_seqs, num_heads, head_dim / merge_dim_block): merge the splits by their lse, a head's dims over
several programs where the rows are fewer than the SMs. With num_splits == 1, stage 1 writes o and
lse directly and stage 2 is skipped. With `new_kv` (kernels/rope_store.NewKV) stage 1 also does
rope_store's work: q rotated in registers, the new key rotated and stored with its value by the
program whose split holds it, before that program reads its keys. With `new_kv` and PDL
(`pdl.early_reads`) stage 1 reads seq_lens, the block table, positions and cos/sin, and asks L2 for
its first EARLY_KEYS keys' K and V rows, before its PDL wait: the caller's (the runner's step)
are host copies made before the step's kernels, never the qkv GEMV's output.
"""

from __future__ import annotations

import math

import torch

from kvspill.kernels.attention_common import (
    attend_keys,
    check_kv_layer,
    dense_attention_ref,
    dot_precision,
    gather_seq_kv,
    key_rows,
    resolve_out,
)
from kvspill.kernels.fused_ops import _rope_cos_sin
from kvspill.kernels.kv_quant import fp8_max, kv_strides, scale_view
from kvspill.kernels.pdl import early_reads, pdl_meta, pdl_wait, prefetch_lines
from kvspill.kernels.rope_store import NewKV, rope_and_store_kv_ref, rope_group_rows, store_new_kv
from kvspill.kernels.triton_compat import num_sms, tl, triton

# Programs per SM that stage 1 aims for: enough CTAs in flight to keep HBM busy. 4 beat 2 and 8
# over batch 1-32, 4K-128K contexts on an H200 (2026-11, bf16, graph-replayed; see _launch_config).
_PROGRAMS_PER_SM = 4
# Upper bound on splits: the stage-2 merge holds all splits of one head in registers.
MAX_SPLITS = 128
# Keys of its split whose K and V rows a stage-1 program asks of L2 before its PDL wait (EARLY):
# 32 beat 16, 64 and 128 on an H100 (8K batch 1: 349.9-350.6 tok/s against 348.2-349.0, 348.7-348.8
# and 343.3-343.4; bench/results/2026-12-05-h100-early-reads).
EARLY_KEYS = tl.constexpr(32)


def choose_num_splits(
    max_seq_len: int, num_seqs: int, num_kv_heads: int, num_sms: int, min_split_tokens: int = 256
) -> int:
    """Splits per seq: as many programs as fit the GPU in one wave (_PROGRAMS_PER_SM x num_sms),
    but no split shorter than min_split_tokens for the longest seq, and at most MAX_SPLITS. Pure.

    Rounded down, not up: a wave and a half of programs ends in a half-empty wave. On an H200
    (2026-12-05, random 8B Q4_K_M, bench/results/2026-12-05-h200-attn-splits) 32 x 2K decoded a step
    in 6.79 ms with 2 splits (512 programs) against 7.42 with 3 (768), 8 x 2K in 3.65 with 8
    against 3.72 with 9."""
    if max_seq_len <= 0 or num_seqs <= 0:
        return 1
    by_length = -(-max_seq_len // min_split_tokens)
    by_occupancy = (_PROGRAMS_PER_SM * num_sms) // (num_seqs * num_kv_heads)
    return max(1, min(by_length, by_occupancy, MAX_SPLITS))


def default_min_split_tokens(head_dim: int) -> int:
    """Shortest split: 16 KB of each K and V row run (8192 // head_dim keys: 128 for head_dim 64,
    64 for 128). On an H200 (2026-12-03, bf16, 32/8 heads, graph-replayed over 8 layers' KV, a
    block table as wide as the context) batch-1 8K decode for head_dim 128 took 15.7 / 16.8 /
    17.6 / 21.1 us (split, merge included) at 64 / 128 / 256 / 512 keys, and was equal within 1%
    at 32K and at batch 4 and 8 (bench/results/2026-12-03-h200-gemv-one-token, attn_sweep.py); on
    an H100 128 against 256 cut head_dim 64's batch-1 8K from 10.7 to 9.3 us."""
    return max(16, 8192 // head_dim)


def paged_decode_attention_ref(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    new_kv: NewKV | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference (also the CPU engine's path); num_splits is accepted and ignored. With
    `new_kv`: `rope_and_store_kv_ref` on copies of q and k first (q, k stay as they are)."""
    o, lse = resolve_out(out, q)
    if new_kv is not None:
        q = q.clone()
        rope_and_store_kv_ref(
            q,
            new_kv.k.clone(),
            new_kv.v,
            new_kv.positions,
            new_kv.cos_sin_cache,
            kv_layer,
            new_kv.slot_mapping,
        )
    for s, seq_len in enumerate(seq_lens.tolist()):
        k, v = gather_seq_kv(kv_layer, block_tables[s], seq_len)
        o_s, lse_s = dense_attention_ref(q[s : s + 1], k, v, scale)
        o[s] = o_s[0]
        lse[s] = lse_s[0]
    return o, lse


@triton.jit
def _decode_split_kernel(
    q_ptr,
    kv_ptr,
    scale_ptr,  # int8 pools: the pool's memory as fp32 (row scales); else unused
    bt_ptr,
    seq_lens_ptr,
    o_ptr,
    lse_ptr,
    scale_log2,
    min_split_tokens,
    stride_qs,
    stride_qh,
    stride_cb,
    stride_ckv,
    stride_cs,
    stride_ch,
    stride_bt,
    stride_os,
    stride_oh,
    stride_ok,
    stride_ls,
    stride_lh,
    stride_lk,
    new_k_ptr,  # ROPE: NewKV's tensors and strides (else unused)
    new_v_ptr,
    pos_ptr,
    cos_sin_ptr,
    slot_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cos,
    BLOCK_SIZE: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_IN_F32: tl.constexpr,
    INT8: tl.constexpr = False,
    ROPE: tl.constexpr = False,  # rope_store's work too (NewKV): q, k unrotated; k, v not stored yet
    FP8_MAX: tl.constexpr = 0.0,
    ROW_LINES: tl.constexpr = 2,  # 128-byte lines a K or V row spans (a power of two)
    EARLY: tl.constexpr = False,  # with PDL: reads that do not need the kernel before ahead of the wait
    PDL: tl.constexpr = False,
):
    if not EARLY:
        pdl_wait(PDL)
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_splits = tl.num_programs(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    start, end, full_end = _split_keys(seq_len, split, num_splits, min_split_tokens, BLOCK_N)
    head_off = kv_head * stride_ch
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    if EARLY:
        # The kernel before (the qkv GEMV) writes q, k and v only: seq_lens, the block table and
        # positions are the step's host copies, the cos/sin table a buffer, and the cache rows were
        # stored by earlier steps, so they are read (the rows asked of L2) while it ends
        # (kernels/pdl.py's contract; bench/results/2026-12-05-h100-early-reads).
        _prefetch_split_kv(
            kv_ptr,
            bt_row,
            head_off,
            start,
            end,
            stride_cb,
            stride_ckv,
            stride_cs,
            BLOCK_SIZE,
            EARLY_KEYS,
            ROW_LINES,
        )
    if ROPE:
        cos, sin = _rope_cos_sin(cos_sin_ptr, pos_ptr, seq, stride_cos, HEAD_DIM // 2)
    if EARLY:
        pdl_wait(PDL)
    rows = tl.arange(0, GROUP_PAD)
    head = kv_head * GROUP + rows
    row_ok = rows < GROUP
    if ROPE:
        q = _rotate_query_and_store_new_kv(
            q_ptr,
            kv_ptr,
            new_k_ptr,
            new_v_ptr,
            cos,
            sin,
            slot_ptr,
            seq,
            kv_head,
            head,
            row_ok,
            (start < end) & (end == seq_len),
            head_off,
            stride_qs,
            stride_qh,
            stride_kt,
            stride_kh,
            stride_vt,
            stride_vh,
            stride_cb,
            stride_ckv,
            stride_cs,
            BLOCK_SIZE,
            HEAD_DIM,
            FP8_MAX,
        )
    else:
        q = _load_group_query(q_ptr, seq, head, row_ok, stride_qs, stride_qh, HEAD_DIM)
    # Keys >= end belong to the next split: masking at end - 1 is the causal mask of attend_tile.
    q_pos = tl.full([GROUP_PAD], 0, dtype=tl.int32) + end - 1
    acc, m_i, l_i = attend_keys(
        q,
        kv_ptr,
        scale_ptr,
        bt_row,
        head_off,
        q_pos,
        start,
        full_end,
        end - 1,
        scale_log2,
        stride_cb,
        stride_ckv,
        stride_cs,
        BLOCK_SIZE,
        HEAD_DIM,
        BLOCK_N,
        DOT_PRECISION,
        DOT_IN_F32,
        INT8,
    )
    o_row = seq.to(tl.int64) * stride_os + head * stride_oh + split * stride_ok
    lse_row = seq.to(tl.int64) * stride_ls + head * stride_lh + split * stride_lk
    _store_split(acc, m_i, l_i, o_ptr + o_row, lse_ptr + lse_row, row_ok)


@triton.jit
def _prefetch_split_kv(
    kv_ptr,
    bt_row,
    head_off,
    start,
    end,
    stride_cb,
    stride_ckv,
    stride_cs,
    BLOCK_SIZE: tl.constexpr,
    KEYS: tl.constexpr,
    ROW_LINES: tl.constexpr,
):
    """`prefetch.global.L2` of the K and V rows of keys [start, min(start + KEYS, end)) of one KV
    head, ROW_LINES 128-byte lines a row (keys past end ask for block 0's first row again)."""
    keys = start + tl.arange(0, KEYS)
    blocks, in_block = key_rows(bt_row, keys, end - 1, stride_cs, head_off, BLOCK_SIZE, True)
    k_rows = kv_ptr + (tl.maximum(blocks, 0) * stride_cb + in_block)
    lines = tl.arange(0, ROW_LINES) * 128
    for plane in tl.static_range(2):
        row_bytes = (k_rows + plane * stride_ckv).to(tl.pointer_type(tl.int8))
        prefetch_lines(row_bytes[:, None] + lines[None, :])


@triton.jit
def _rotate_query_and_store_new_kv(
    q_ptr,
    kv_ptr,
    new_k_ptr,
    new_v_ptr,
    cos,
    sin,
    slot_ptr,
    seq,
    kv_head,
    head,
    row_ok,
    holds_new_key,
    head_off,
    stride_qs,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cb,
    stride_ckv,
    stride_cs,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """rope_store's work in a split program (NewKV): its GQA group's q [GROUP_PAD, HEAD_DIM] rotated
    in registers; the split that holds the new key (seq_len - 1) also rotates and stores it and v
    before any of its keys are read, the barrier making the CTA's stores visible to all its threads
    (the branch is the same for all of them). No other split reads that key, so no other waits."""
    q_rows = q_ptr + seq.to(tl.int64) * stride_qs + head * stride_qh
    q = rope_group_rows(q_rows, row_ok, cos, sin, HEAD_DIM)
    slot = tl.load(slot_ptr + seq)
    if holds_new_key & (slot >= 0):
        store_new_kv(
            new_k_ptr + seq.to(tl.int64) * stride_kt + kv_head * stride_kh,
            new_v_ptr + seq.to(tl.int64) * stride_vt + kv_head * stride_vh,
            kv_ptr,
            slot,
            cos,
            sin,
            head_off,
            stride_cb,
            stride_ckv,
            stride_cs,
            BLOCK_SIZE,
            HEAD_DIM,
            FP8_MAX,
        )
        tl.debug_barrier()
    return q


@triton.jit
def _store_split(acc, m_i, l_i, o_rows, lse_rows, row_ok):
    """The split's o = acc / l and natural-log lse of its [GROUP_PAD] query rows (o_rows, lse_rows:
    their pointers); a row without keys gets o = 0 and lse = -inf."""
    dims = tl.arange(0, acc.shape[1])
    has_keys = l_i > 0
    l_safe = tl.where(has_keys, l_i, 1.0)
    o = acc / l_safe[:, None]
    lse = tl.where(has_keys, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    tl.store(o_rows[:, None] + dims[None, :], o.to(o_rows.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_rows, lse, mask=row_ok)


@triton.jit
def _load_group_query(q_ptr, seq, head, row_ok, stride_qs, stride_qh, HEAD_DIM: tl.constexpr):
    """q [GROUP_PAD, HEAD_DIM]: the seq's query heads of one GQA group; padding rows are 0 and
    never stored."""
    dims = tl.arange(0, HEAD_DIM)
    return tl.load(
        q_ptr + seq.to(tl.int64) * stride_qs + head[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )


@triton.jit
def _split_keys(seq_len, split, num_splits, min_split_tokens, BLOCK_N: tl.constexpr):
    """The keys of this split: [start, end), the first (end - start) // BLOCK_N whole tiles ending at
    full_end. Splits are whole tiles of at least min_split_tokens; trailing ones may be empty."""
    split_tokens = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    split_tokens = tl.maximum(split_tokens, min_split_tokens)
    start = split * split_tokens
    end = tl.minimum(start + split_tokens, seq_len)
    full_end = start + tl.maximum(end - start, 0) // BLOCK_N * BLOCK_N
    return start, end, full_end


@triton.jit
def _decode_merge_kernel(
    part_o_ptr,
    part_lse_ptr,
    o_ptr,
    lse_ptr,
    num_splits,
    stride_pos,
    stride_poh,
    stride_pok,
    stride_pls,
    stride_plh,
    stride_os,
    stride_oh,
    stride_ls,
    stride_lh,
    DIM_BLOCK: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    PDL: tl.constexpr = False,
):
    pdl_wait(PDL)
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dim_block = tl.program_id(2)
    splits = tl.arange(0, SPLITS_PAD)
    dims = dim_block * DIM_BLOCK + tl.arange(0, DIM_BLOCK)
    in_range = splits < num_splits
    # Both loads are issued at once: every split below num_splits was stored by stage 1 (an empty
    # one as o = 0, lse = -inf), so part_o needs no mask from part_lse (one L2 round trip less).
    part_lse = tl.load(
        part_lse_ptr + seq * stride_pls + head * stride_plh + splits, mask=in_range, other=float("-inf")
    )
    part_o = tl.load(
        part_o_ptr + seq * stride_pos + head * stride_poh + splits[:, None] * stride_pok + dims[None, :],
        mask=in_range[:, None],
        other=0.0,
    )  # part_o: [SPLITS_PAD, DIM_BLOCK]
    valid = part_lse > float("-inf")
    m = tl.max(part_lse, 0)
    m_safe = tl.where(m > float("-inf"), m, 0.0)
    w = tl.where(valid, tl.exp(part_lse - m_safe), 0.0)
    denom = tl.sum(w, 0)
    denom_safe = tl.where(denom > 0, denom, 1.0)
    o = tl.sum(part_o * w[:, None], 0) / denom_safe
    tl.store(o_ptr + seq * stride_os + head * stride_oh + dims, o.to(o_ptr.dtype.element_ty))
    if dim_block == 0:
        lse = tl.where(denom > 0, m_safe + tl.log(denom_safe), float("-inf"))
        tl.store(lse_ptr + seq * stride_ls + head * stride_lh, lse)


def merge_dim_block(num_rows: int, head_dim: int, num_sms: int) -> int:
    """Dims of a head that one merge program takes: the whole head, or a quarter (at least 32)
        where (seq, head) rows are fewer than the SMs. At batch 1 the 32 programs of an 8B model would
        each pull all splits of a head (66 x 512 bytes at 8K) from L2 on 32 SMs; four programs a head
        share that pull over 128: decode attention alone at 1 x 8K 19.2 -> 17.3 us a layer, random 8B
    Q4_K_M at 8K 351.4 -> 353.0 tok/s (H100, bench/results/2026-12-05-h100-merge-defaults)."""
    if num_rows >= num_sms or head_dim < 64:
        return head_dim
    return max(32, head_dim // 4)


# Sequences from which stage 1 (head_dim 128) runs three pipeline stages, not two. Random 8B
# Q4_K_M at N x 2K, H100, alternated (bench/results/2026-12-06-h100-gated-down, calls 26, 28): 32
# seqs +0.9% (8.403 / 8.401 -> 8.324 / 8.321 ms a step), 16 -0.2%, 8 +0.8%, 2 -0.7%, 8K batch 1
# -1.0%; on an H200 the kernel alone at 32 x 2K 77.3 -> 69.4 us a layer but 8 x 2K slower
# (bench/results/2026-12-05-h200-attn-splits): 32 is where both cards gain.
STAGE3_MIN_SEQS = 32
# Sequences (first, last) for which stage 1 (head_dim 128) runs 32-key tiles on two warps, three
# stages deep: at 2K contexts their splits are 128-256 keys, 4-8 tiles of 32 against 2-4 of 64, and
# the deeper pipeline hides more of each short split (H100: 8 x 2K -2.0% a step, 4 x 2K -1.0%; 2
# and 16 sequences lost, 32 and batch 1 equal; bench/results/2026-12-06-h100-attn-8seq). Long
# contexts at 4-8 sequences take these tiles too (the launch cannot see the lengths: a graph's
# block table is as wide as the model's context), and gain there as well: 8 x 32K -2.4% a step
# (H100, bench/results/2026-12-06-h100-tiles-scale-loads). Not measured on an H200.
SHORT_TILE_SEQS = (4, 8)


def _launch_config(head_dim: int, is_cuda: bool, num_seqs: int = 1) -> tuple[int, int, int]:
    """(BLOCK_N, num_warps, num_stages) of stage 1; small tiles under the interpreter.

    GPU values from a sweep on an H200 (triton 3.6, bf16, 32/8 heads, batch 1-32, 4K-128K
    contexts, block_size 16): 3.3-4.2 TB/s from 32K tokens up, against a 4.2 TB/s copy.
    Head dims above 128 are untuned. From STAGE3_MIN_SEQS sequences head_dim 128 gets three
    pipeline stages (each program's split is long there: one wave holds few splits a sequence);
    within SHORT_TILE_SEQS, 32-key tiles on two warps.
    """
    if not is_cuda:
        return 16, 4, 1
    if head_dim <= 64:
        return 64, 2, 2
    if head_dim <= 128:
        if SHORT_TILE_SEQS[0] <= num_seqs <= SHORT_TILE_SEQS[1]:
            return 32, 2, 3
        return 64, 4, 3 if num_seqs >= STAGE3_MIN_SEQS else 2
    return 32, 4, 2


def paged_decode_attention(
    q: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    scale: float,
    num_splits: int | None = None,
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    min_split_tokens: int | None = None,
    new_kv: NewKV | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton wrapper; returns (o, lse), see the module docstring for shapes.

    num_splits is the fixed number of stage-1 splits per seq; None chooses it with
    `choose_num_splits` from the block table's width (no device sync). `out` is o alone or
    (o, lse), preallocated. min_split_tokens (rounded up to whole key tiles; default
    `default_min_split_tokens`) stops short seqs from being cut into tiny splits. `new_kv`: the
    kernel does rope_store's work as well (q and k given unrotated, k and v not stored yet;
    kernels/rope_store.py), one launch fewer.
    """
    _check_decode_args(q, kv_layer, block_tables, seq_lens)
    if new_kv is not None:
        new_kv.check(q, kv_layer)
    o, lse = resolve_out(out, q)
    num_seqs, num_heads, head_dim = q.shape
    if num_seqs == 0:
        return o, lse
    launch = _launch_config(head_dim, q.is_cuda, num_seqs)
    block_n = launch[0]
    if min_split_tokens is None:
        min_split_tokens = default_min_split_tokens(head_dim)
    assert min_split_tokens > 0, f"min_split_tokens {min_split_tokens} must be positive"
    min_split_tokens = triton.cdiv(min_split_tokens, block_n) * block_n  # whole key tiles per split
    if num_splits is None:
        num_splits = _auto_num_splits(q, kv_layer, block_tables, min_split_tokens)
    assert 1 <= num_splits <= MAX_SPLITS, f"num_splits {num_splits} outside [1, {MAX_SPLITS}]"
    if num_splits == 1:
        part_o, part_lse = o.unsqueeze(2), lse.unsqueeze(2)  # stage 1 writes the result itself
    else:
        part_o = q.new_empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32)
        part_lse = q.new_empty((num_seqs, num_heads, num_splits), dtype=torch.float32)
    _launch_split_stage(
        q, kv_layer, block_tables, seq_lens, scale, part_o, part_lse, min_split_tokens, launch, new_kv
    )
    if num_splits > 1:
        _merge_splits(part_o, part_lse, o, lse)
    return o, lse


def _check_decode_args(
    q: torch.Tensor, kv_layer: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor
) -> None:
    """Asserts the shapes, dtypes, strides and devices the kernels assume."""
    num_seqs, num_heads, _ = q.shape
    num_kv_heads = check_kv_layer(kv_layer, q)[3]
    assert num_heads % num_kv_heads == 0, f"num_heads {num_heads} not a multiple of {num_kv_heads}"
    assert block_tables.shape[0] == num_seqs, f"block_tables has {block_tables.shape[0]} rows, q {num_seqs}"
    assert block_tables.dtype == torch.int32 and block_tables.stride(1) == 1, (
        "block_tables int32, rows contiguous"
    )
    assert seq_lens.shape == (num_seqs,) and seq_lens.dtype == torch.int32, (
        f"seq_lens must be int32 [{num_seqs}]"
    )
    assert seq_lens.is_contiguous() and block_tables.device == seq_lens.device == q.device


def _auto_num_splits(
    q: torch.Tensor, kv_layer: torch.Tensor, block_tables: torch.Tensor, min_split_tokens: int
) -> int:
    """`choose_num_splits` for the longest seq the block table can hold: no device sync."""
    block_size, num_kv_heads = kv_layer.shape[2], kv_layer.shape[3]
    return choose_num_splits(
        block_tables.shape[1] * block_size, q.shape[0], num_kv_heads, num_sms(q.device), min_split_tokens
    )


def _launch_split_stage(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    part_o: torch.Tensor,  # [num_seqs, num_heads, num_splits, head_dim]
    part_lse: torch.Tensor,  # [num_seqs, num_heads, num_splits]
    min_split_tokens: int,
    launch: tuple[int, int, int],  # _launch_config's (BLOCK_N, num_warps, num_stages)
    new_kv: NewKV | None,
) -> None:
    """Stage 1: one program per (seq, KV head, split) writes its split's o and lse."""
    num_seqs, num_heads, head_dim = q.shape
    _, _, block_size, num_kv_heads, _ = kv_layer.shape
    block_n, num_warps, num_stages = launch
    group = num_heads // num_kv_heads
    if new_kv is None:  # unused pointers and strides: q's
        rope_args: tuple[torch.Tensor | int, ...] = (q, q, q, q, q, 0, 0, 0, 0, 0)
    else:
        k, v, cos_sin = new_kv.k, new_kv.v, new_kv.cos_sin_cache
        rope_args = (k, v, new_kv.positions, cos_sin, new_kv.slot_mapping)
        rope_args += (k.stride(0), k.stride(1), v.stride(0), v.stride(1), cos_sin.stride(0))
    _decode_split_kernel[(num_seqs, num_kv_heads, part_o.shape[2])](
        q,
        kv_layer,
        scale_view(kv_layer),
        block_tables,
        seq_lens,
        part_o,
        part_lse,
        scale * math.log2(math.e),
        min_split_tokens,
        q.stride(0),
        q.stride(1),
        *kv_strides(kv_layer),
        block_tables.stride(0),
        part_o.stride(0),
        part_o.stride(1),
        part_o.stride(2),
        part_lse.stride(0),
        part_lse.stride(1),
        part_lse.stride(2),
        *rope_args,
        BLOCK_SIZE=block_size,
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_N=block_n,
        DOT_PRECISION=dot_precision(q.dtype),
        DOT_IN_F32=not q.is_cuda,
        INT8=kv_layer.dtype == torch.int8,
        ROPE=new_kv is not None,
        FP8_MAX=fp8_max(kv_layer.dtype),
        ROW_LINES=triton.next_power_of_2(triton.cdiv(head_dim * kv_layer.element_size(), 128)),
        # only in the runner's step (new_kv), whose seq_lens, block table and positions are the
        # step's host copies: no caller's kernel just before writes them
        EARLY=new_kv is not None and early_reads(q.device),
        num_warps=num_warps,
        num_stages=num_stages,
        **pdl_meta(q.device),
    )


def _merge_splits(
    part_o: torch.Tensor,  # [num_seqs, num_heads, num_splits, head_dim] float32
    part_lse: torch.Tensor,  # [num_seqs, num_heads, num_splits] float32, contiguous
    o: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    lse: torch.Tensor,  # [num_seqs, num_heads] float32
) -> None:
    """Stage 2: programs per (seq, head) (one, or one per merge_dim_block dims) merge its splits by
    lse into o and lse."""
    num_seqs, num_heads, num_splits, head_dim = part_o.shape
    dim_block = merge_dim_block(num_seqs * num_heads, head_dim, num_sms(o.device))
    _decode_merge_kernel[(num_seqs, num_heads, head_dim // dim_block)](
        part_o,
        part_lse,
        o,
        lse,
        num_splits,
        part_o.stride(0),
        part_o.stride(1),
        part_o.stride(2),
        part_lse.stride(0),
        part_lse.stride(1),
        o.stride(0),
        o.stride(1),
        lse.stride(0),
        lse.stride(1),
        DIM_BLOCK=dim_block,
        SPLITS_PAD=triton.next_power_of_2(num_splits),
        num_warps=4 if dim_block >= 128 else 2,
        **pdl_meta(o.device),
    )
