"""Shared math of attention over cold KV: query folding, unmasked dense attention, merging.

Cold blocks are full and lie before every query of the step (the TransferPlan invariant), so
every query of a sequence sees every cold key: attention over them has no mask, and the order
of the cold keys does not matter. That lets T query tokens of one sequence be "folded" into a
single decode query whose GQA group is T * group (heads ordered kv head, token, group): the
decode kernels and `dense_attention_ref` (whose one query sits after every key) then compute
unmasked multi-query attention, reading each key once per T tokens.

Shapes: q [num_rows, num_heads, head_dim]; k, v [num_keys, num_kv_heads, head_dim];
o [num_rows, num_heads, head_dim]; lse [num_rows, num_heads] float32 (natural log).
"""

from __future__ import annotations

import torch

from kvspill.kernels.attention_common import CPU_FLASH, dense_attention_ref
from kvspill.kernels.merge_states import merge_attention_states, merge_attention_states_ref

# Bounds the fp32 score matrix of one CPU call (kv heads x folded rows x keys) to 64 MiB.
_MAX_SCORE_ELEMS = 1 << 24


def fold_queries(q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """[num_seqs, T, num_heads, head_dim] -> [num_seqs, num_kv_heads * T * group, head_dim]."""
    num_seqs, t, num_heads, head_dim = q.shape
    group = num_heads // num_kv_heads
    folded = q.view(num_seqs, t, num_kv_heads, group, head_dim).permute(0, 2, 1, 3, 4)
    return folded.reshape(num_seqs, num_kv_heads * t * group, head_dim)


def unfold_outputs(
    o: torch.Tensor,  # [num_seqs, num_kv_heads * T * group, head_dim]
    lse: torch.Tensor,  # [num_seqs, num_kv_heads * T * group]
    t: int,
    num_kv_heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of `fold_queries`: o [num_seqs * T, num_heads, head_dim], lse [num_seqs * T, num_heads]."""
    num_seqs, folded_heads, head_dim = o.shape
    group = folded_heads // (num_kv_heads * t)
    num_heads = num_kv_heads * group
    o = o.view(num_seqs, num_kv_heads, t, group, head_dim).permute(0, 2, 1, 3, 4)
    lse = lse.view(num_seqs, num_kv_heads, t, group).permute(0, 2, 1, 3)
    return o.reshape(num_seqs * t, num_heads, head_dim), lse.reshape(num_seqs * t, num_heads)


def attend_unmasked_ref(
    q: torch.Tensor,  # [num_rows, num_heads, head_dim]
    k: torch.Tensor,  # [num_keys, num_kv_heads, head_dim]
    v: torch.Tensor,  # [num_keys, num_kv_heads, head_dim]
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row attends every key, in fp32 on q's device: (o float32, lse float32).

    Rows are folded into single decode queries (`fold_queries`) in tiles sized so one call's
    score matrix stays under _MAX_SCORE_ELEMS; with no keys o is 0 and lse is -inf.
    """
    num_rows, num_heads, head_dim = q.shape
    num_keys, num_kv_heads, _ = k.shape
    o = q.new_zeros((num_rows, num_heads, head_dim), dtype=torch.float32)
    lse = q.new_full((num_rows, num_heads), float("-inf"), dtype=torch.float32)
    if num_keys == 0 or num_rows == 0:
        return o, lse
    tile = max(1, _MAX_SCORE_ELEMS // (num_heads * num_keys))
    for r0 in range(0, num_rows, tile):
        r1 = min(num_rows, r0 + tile)
        folded = fold_queries(q[r0:r1].unsqueeze(0), num_kv_heads)  # [1, kv * t * group, head_dim]
        o_f, lse_f = dense_attention_ref(folded, k, v, scale)
        o[r0:r1], lse[r0:r1] = unfold_outputs(o_f, lse_f, r1 - r0, num_kv_heads)
    return o, lse


def merge_partials(
    o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """LSE merge of two partials over disjoint keys: the Triton kernel on CUDA, else the reference."""
    if o_a.is_cuda:
        return merge_attention_states(o_a, lse_a, o_b.contiguous(), lse_b)
    return merge_attention_states_ref(o_a, lse_a, o_b, lse_b)


def merge_rows_into(
    acc_o: torch.Tensor,  # [num_rows, num_heads, head_dim] float32, updated in place
    acc_lse: torch.Tensor,  # [num_rows, num_heads] float32, updated in place
    rows: torch.Tensor,  # [n] int64, distinct rows of acc
    o: torch.Tensor,  # [n, num_heads, head_dim]
    lse: torch.Tensor,  # [n, num_heads] float32
) -> None:
    """acc[rows] = merge(acc[rows], (o, lse))."""
    merged_o, merged_lse = merge_partials(acc_o.index_select(0, rows), acc_lse.index_select(0, rows), o, lse)
    acc_o.index_copy_(0, rows, merged_o)
    acc_lse.index_copy_(0, rows, merged_lse)


def attend_unmasked_cpu(
    q: torch.Tensor,  # [num_rows, num_heads, head_dim] on the CPU
    k: torch.Tensor,  # [num_keys, num_kv_heads, head_dim], contiguous
    v: torch.Tensor,  # [num_keys, num_kv_heads, head_dim], contiguous
    scale: float,
    num_key_splits: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`attend_unmasked_ref` through torch's CPU flash kernel, in the KV dtype (no fp32 copy of K/V).

    Queries are folded per kv head (batch = kv head); the keys are cut into `num_key_splits`
    equal parts (it must divide num_keys) run as "heads" so that a decode keeps every core busy,
    and the parts merge by LSE. Returns (o float32, lse float32).
    """
    num_rows, num_heads, head_dim = q.shape
    num_keys, num_kv_heads, _ = k.shape
    if CPU_FLASH is None or num_keys == 0 or num_keys % num_key_splits:
        return attend_unmasked_ref(q, k, v, scale)
    s = num_key_splits
    rows = num_rows * (num_heads // num_kv_heads)
    qf = fold_queries(q.unsqueeze(0).to(k.dtype), num_kv_heads).view(num_kv_heads, 1, rows, head_dim)
    qf = qf.expand(num_kv_heads, s, rows, head_dim)
    # k, v: [num_keys, kv, dim] -> [kv, s, num_keys / s, dim], views
    kf = k.permute(1, 0, 2).unflatten(1, (s, num_keys // s))
    vf = v.permute(1, 0, 2).unflatten(1, (s, num_keys // s))
    o, lse = CPU_FLASH(qf, kf, vf, 0.0, False, scale=scale)  # o: [kv, s, rows, dim], lse: [kv, s, rows]
    o = o.float()
    if s > 1:
        m = lse.amax(1, keepdim=True)
        w = torch.exp(lse - m)  # [kv, s, rows]
        denom = w.sum(1)
        o = (o * w[..., None]).sum(1) / denom[..., None]
        lse = m.squeeze(1) + torch.log(denom)
    o = o.reshape(1, num_kv_heads * rows, head_dim)
    return unfold_outputs(o, lse.reshape(1, num_kv_heads * rows), num_rows, num_kv_heads)
