"""Causal attention of a chunk of queries per sequence over the paged KV cache (chunked prefill).

Shapes:
    q:               [num_tokens, num_heads, head_dim]   tokens of several seqs, concatenated
    kv_layer:        [num_blocks, 2, block_size, num_kv_heads, row_dim]   a view of one layer
                     (row_dim = head_dim, or head_dim + 4 for int8 pools: kernels/kv_quant.py)
    block_tables:    [num_seqs, max_blocks_per_seq] int32
    query_start_loc: [num_seqs + 1] int32, cumulative query lengths (query_start_loc[0] == 0)
    seq_lens:        [num_seqs] int32, context length INCLUDING this chunk's queries
    o:               [num_tokens, num_heads, head_dim] in q's dtype
    lse:             [num_tokens, num_heads] float32, natural-log logsumexp of scale * q.k

Invariants:
- The chunk's own K/V is already in the cache (store_kv ran first). Query i of seq s sits at
  position seq_lens[s] - q_len_s + i and attends to keys 0..position (bottom-right causal).
- Every query sees at least key 0, so lse is finite; a seq with q_len 0 is skipped.
- Block-table entries past a seq's last block are never read.
- Softmax statistics and accumulators are fp32 whatever the input dtype.

Kernel: FlashAttention-2 tiles. One program owns BLOCK_Q query tokens times the GROUP query heads
that share one KV head (GQA packed into the M dimension of tl.dot), so each K/V tile is loaded
once per group; keys are gathered through the block table in tiles of BLOCK_N tokens. Key tiles
wholly below the tile's first query position skip the causal mask; tiles past its last position
are never visited. Tiles are launched longest-first.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kvspill.kernels.attention_common import (
    CPU_FLASH,
    attend_keys,
    check_kv_layer,
    dense_attention_ref,
    dot_precision,
    gather_seq_kv,
    resolve_out,
)
from kvspill.kernels.kv_quant import kv_strides, scale_view
from kvspill.kernels.merge_states import merge_attention_states_ref
from kvspill.kernels.triton_compat import tl, triton


def paged_prefill_attention_ref(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference; same contract as `paged_prefill_attention`."""
    tables = (block_tables, query_start_loc, seq_lens)
    return _each_sequence(dense_attention_ref, q, kv_layer, tables, scale, resolve_out(out, q))


def paged_prefill_attention_cpu(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU engine's path (same contract as `paged_prefill_attention`): each sequence's keys
    gathered, then torch's CPU flash kernel in fp32, bottom-right causal (`_flash_causal`); the
    reference where torch has no such kernel. 4-6x the reference's speed at 2K keys, whose fp32
    score matrices were most of the embedded model's prefill (bench/results/2026-12-07-cpu-prefill-fp32/)."""
    attend = _flash_causal if CPU_FLASH is not None else dense_attention_ref
    tables = (block_tables, query_start_loc, seq_lens)
    return _each_sequence(attend, q, kv_layer, tables, scale, resolve_out(out, q))


def _each_sequence(
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]],
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor],  # block_tables, query_start_loc, seq_lens
    scale: float,
    out: tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """out = (o, lse) of each sequence's chunk by `attend(q_chunk, keys, values, scale)` over its
    gathered keys (`gather_seq_kv`); sequences without queries are skipped."""
    block_tables, query_start_loc, seq_lens = tables
    o, lse = out
    starts = query_start_loc.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        t0, t1 = starts[s], starts[s + 1]
        if t1 > t0:
            k, v = gather_seq_kv(kv_layer, block_tables[s], seq_len)
            o[t0:t1], lse[t0:t1] = attend(q[t0:t1], k, v, scale)
    return o, lse


def _flash_causal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """dense_attention_ref's result (query i at seq_len - q_len + i) by the CPU flash kernel: the
    keys before the chunk unmasked, the chunk's own keys under the kernel's causal mask (top-left,
    right for a square), merged by LSE: no [q_len, seq_len] mask, whose size at long contexts would
    rival the KV's."""
    prior = k.shape[0] - q.shape[0]
    o, lse = _flash(q, k[prior:], v[prior:], scale, causal=True)
    if prior == 0:
        return o, lse
    o_prior, lse_prior = _flash(q, k[:prior], v[:prior], scale, causal=False)
    return merge_attention_states_ref(o_prior, lse_prior, o, lse)


def _flash(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One flash call in fp32: a kv head a batch entry, its query heads the kernel's heads over K/V
    views expanded to them. o [q_len, num_heads, head_dim] and lse [q_len, num_heads], fp32."""
    n, num_heads, head_dim = q.shape
    num_keys, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    qh = q.float().view(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)  # [kv, group, n, dim]
    kh = k.float().transpose(0, 1)[:, None].expand(num_kv_heads, group, num_keys, head_dim)
    vh = v.float().transpose(0, 1)[:, None].expand(num_kv_heads, group, num_keys, head_dim)
    assert CPU_FLASH is not None
    o, lse = CPU_FLASH(qh, kh, vh, 0.0, causal, scale=scale)
    return o.permute(2, 0, 1, 3).reshape(n, num_heads, head_dim), lse.permute(2, 0, 1).reshape(n, num_heads)


@triton.jit
def _prefill_kernel(
    q_ptr,
    kv_ptr,
    scale_ptr,  # int8 pools: the pool's memory as fp32 (row scales); else unused
    o_ptr,
    lse_ptr,
    bt_ptr,
    qsl_ptr,
    seq_lens_ptr,
    scale_log2,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_cb,
    stride_ckv,
    stride_cs,
    stride_ch,
    stride_bt,
    BLOCK_SIZE: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_IN_F32: tl.constexpr,
    INT8: tl.constexpr = False,
):
    # Grid: (max query tiles, num_kv_heads, num_seqs); tile order reversed so the longest
    # (last, most keys) tiles of each seq start first.
    tile = tl.num_programs(0) - 1 - tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = tl.program_id(2)
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    if tile * BLOCK_Q >= q_len:
        return
    ctx_len = tl.load(seq_lens_ptr + seq) - q_len  # keys before this chunk
    tok, head, row_ok, q_pos = _query_rows(tile, kv_head, q_len, ctx_len, GROUP, BLOCK_M, BLOCK_Q)
    tok64 = (q_start + tok).to(tl.int64)
    q = _load_query_rows(q_ptr, tok64, head, row_ok, stride_qt, stride_qh, HEAD_DIM)
    first_pos = ctx_len + tile * BLOCK_Q
    last_pos = ctx_len + tl.minimum((tile + 1) * BLOCK_Q, q_len) - 1
    full_end = ((first_pos + 1) // BLOCK_N) * BLOCK_N  # keys < full_end are visible to all rows
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    head_off = kv_head * stride_ch
    acc, m_i, l_i = attend_keys(
        q,
        kv_ptr,
        scale_ptr,
        bt_row,
        head_off,
        q_pos,
        0,
        full_end,
        last_pos,
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
    _store_o(o_ptr, acc, l_i, tok64, head, row_ok, stride_ot, stride_oh, HEAD_DIM)
    _store_lse(lse_ptr, m_i, l_i, tok64, head, row_ok, stride_lt, stride_lh)


@triton.jit
def _query_rows(
    tile, kv_head, q_len, ctx_len, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr
):
    """The BLOCK_M rows of a query tile, GQA packed: row r is token tile * BLOCK_Q + r // GROUP
    (within the chunk) of head kv_head * GROUP + r % GROUP. Returns (tok, head, row_ok, q_pos)."""
    rows = tl.arange(0, BLOCK_M)
    tok = tile * BLOCK_Q + rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    row_ok = (rows < BLOCK_Q * GROUP) & (tok < q_len)
    q_pos = ctx_len + tl.minimum(tok, q_len - 1)  # padding rows reuse a real position: no NaN
    return tok, head, row_ok, q_pos


@triton.jit
def _load_query_rows(q_ptr, tok64, head, row_ok, stride_qt, stride_qh, HEAD_DIM: tl.constexpr):
    """q [BLOCK_M, HEAD_DIM] of the tile's rows; padding rows are 0."""
    dims = tl.arange(0, HEAD_DIM)
    return tl.load(
        q_ptr + tok64[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )


@triton.jit
def _store_o(o_ptr, acc, l_i, tok64, head, row_ok, stride_ot, stride_oh, HEAD_DIM: tl.constexpr):
    """o = acc / l_i in o's dtype, for the tile's real rows."""
    dims = tl.arange(0, HEAD_DIM)
    o = acc / l_i[:, None]
    tl.store(
        o_ptr + tok64[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
        o.to(o_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )


@triton.jit
def _store_lse(lse_ptr, m_i, l_i, tok64, head, row_ok, stride_lt, stride_lh):
    """The rows' logsumexp in natural-log units (m_i and l_i are in log2 units)."""
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    tl.store(lse_ptr + tok64 * stride_lt + head * stride_lh, lse, mask=row_ok)


def _launch_config(head_dim: int, is_cuda: bool, dtype: torch.dtype) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages). Small tiles under the interpreter keep tests fast.

    GPU values from a sweep on an H200 (triton 3.6, bf16, 32/8 heads, chunk 2048 over a 32K
    context, block_size 16): head_dim 64 at 365 TFLOP/s, 128 at 397. 256 and fp32 (whose
    tiles take twice the shared memory) are only sized to fit, not tuned.
    """
    if not is_cuda:
        return 32, 16, 4, 1
    if dtype == torch.float32:
        return 64, 32, 4, 2
    if head_dim <= 64:
        return 64, 64, 4, 2
    if head_dim <= 128:
        return 128, 64, 4, 3
    return 64, 32, 4, 2


def paged_prefill_attention(
    q: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    scale: float,
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    max_query_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton wrapper; returns (o, lse), see the module docstring for shapes.

    `out` is o alone or (o, lse), preallocated. `max_query_len` (longest chunk) sizes the grid;
    without it the wrapper reads query_start_loc on the host (a device sync).
    """
    _check_prefill_args(q, kv_layer, block_tables, query_start_loc, seq_lens)
    o, lse = resolve_out(out, q)
    if q.shape[0] == 0 or block_tables.shape[0] == 0:
        return o, lse
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item())
    _launch_prefill(q, kv_layer, block_tables, query_start_loc, seq_lens, scale, o, lse, max_query_len)
    return o, lse


def _check_prefill_args(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
) -> None:
    """Asserts the shapes, dtypes, strides and devices the kernel assumes."""
    num_heads = q.shape[1]
    num_seqs = block_tables.shape[0]
    num_kv_heads = check_kv_layer(kv_layer, q)[3]
    assert num_heads % num_kv_heads == 0, f"num_heads {num_heads} not a multiple of {num_kv_heads}"
    assert block_tables.dtype == torch.int32 and block_tables.stride(1) == 1, (
        "block_tables int32, rows contiguous"
    )
    assert query_start_loc.shape == (num_seqs + 1,) and query_start_loc.dtype == torch.int32, (
        f"query_start_loc must be int32 [{num_seqs + 1}]"
    )
    assert seq_lens.shape == (num_seqs,) and seq_lens.dtype == torch.int32, (
        f"seq_lens must be int32 [{num_seqs}]"
    )
    assert query_start_loc.is_contiguous() and seq_lens.is_contiguous()
    assert block_tables.device == query_start_loc.device == seq_lens.device == q.device


def _launch_prefill(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    o: torch.Tensor,
    lse: torch.Tensor,
    max_query_len: int,
) -> None:
    """One program per (query tile, KV head, seq), tile sizes from `_launch_config`."""
    _, num_heads, head_dim = q.shape
    _, _, block_size, num_kv_heads, _ = kv_layer.shape
    group = num_heads // num_kv_heads
    block_m, block_n, num_warps, num_stages = _launch_config(head_dim, q.is_cuda, q.dtype)
    block_q = block_m // group
    grid = (triton.cdiv(max_query_len, block_q), num_kv_heads, block_tables.shape[0])
    _prefill_kernel[grid](
        q,
        kv_layer,
        scale_view(kv_layer),
        o,
        lse,
        block_tables,
        query_start_loc,
        seq_lens,
        scale * math.log2(math.e),
        q.stride(0),
        q.stride(1),
        o.stride(0),
        o.stride(1),
        lse.stride(0),
        lse.stride(1),
        *kv_strides(kv_layer),
        block_tables.stride(0),
        BLOCK_SIZE=block_size,
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        DOT_PRECISION=dot_precision(q.dtype),
        DOT_IN_F32=not q.is_cuda,
        INT8=kv_layer.dtype == torch.int8,
        num_warps=num_warps,
        num_stages=num_stages,
    )
