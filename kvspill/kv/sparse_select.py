"""Query-aware selection of cold blocks (Quest): score block summaries, keep a token budget.

Score of a block for one query row q and kv head h (an upper bound of q . k over the block's
keys, from the per-channel key min/max of `kv/block_summary.py`):

    bound(q, block) = sum_d max(q_d * kmin_d, q_d * kmax_d)
                    = kmax . relu(q) + kmin . min(q, 0)          (two matmuls)

A kv head's score of a block is the maximum bound over its GQA query group and the step's query
rows of the sequence. The gather moves whole blocks (all kv heads), so one block list serves
every head of a sequence: each head ranks the blocks by its score (ties: lower block index
first), a block's priority is its best rank over the heads, and the `budget_blocks` blocks of
best priority are kept (ties again by block index). So each head's top blocks come in
round-robin and no head's scale drowns the others. Deterministic given the inputs: stable sorts
only, no randomness; the result is in ascending block order.

Shapes: q [num_rows, num_heads, head_dim]; summary [num_blocks, 2, num_kv_heads, head_dim]
(dim 1: 0 = min, 1 = max); scores [num_kv_heads, num_blocks] float32.
"""

from __future__ import annotations

import torch

from kvspill.kernels.block_select import select_top_blocks

# Matmul dtypes; fp8 summaries are widened first (torch has no fp8 matmul on every device).
_MATMUL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def quest_scores_ref(q: torch.Tensor, summary: torch.Tensor) -> torch.Tensor:
    """Torch reference, straight from the definition (fp32): [num_kv_heads, num_blocks]."""
    num_rows, num_heads, head_dim = q.shape
    num_kv_heads = summary.shape[2]
    qg = q.float().view(num_rows, num_kv_heads, num_heads // num_kv_heads, head_dim)
    kmin = summary[:, 0].float()[:, None, :, None, :]  # [blocks, 1, kv, 1, dim]
    kmax = summary[:, 1].float()[:, None, :, None, :]
    bound = torch.maximum(qg * kmin, qg * kmax).sum(-1)  # [blocks, rows, kv, group]
    return bound.amax(dim=(1, 3)).transpose(0, 1).contiguous()


def quest_scores(q: torch.Tensor, summary: torch.Tensor) -> torch.Tensor:
    """[num_kv_heads, num_blocks] float32, two batched matmuls per call (see the module docstring)."""
    num_rows, num_heads, head_dim = q.shape
    num_kv_heads = summary.shape[2]
    dtype = summary.dtype if summary.dtype in _MATMUL_DTYPES else torch.float32
    # [kv, rows * group, dim]: every query row of a head's group
    qh = (
        q.to(dtype)
        .view(num_rows, num_kv_heads, -1, head_dim)
        .transpose(0, 1)
        .reshape(num_kv_heads, -1, head_dim)
    )
    pos = qh.clamp(min=0)
    neg = qh - pos
    kmin = summary[:, 0].to(dtype).transpose(0, 1)  # [kv, blocks, dim]
    kmax = summary[:, 1].to(dtype).transpose(0, 1)
    bound = torch.baddbmm(
        torch.bmm(kmax, pos.transpose(1, 2)), kmin, neg.transpose(1, 2)
    )  # [kv, blocks, rows*group]
    return bound.amax(dim=2).float()


def select_blocks(scores: torch.Tensor, budget_blocks: int) -> torch.Tensor:
    """Indices (int64, ascending) of the `min(budget_blocks, num_blocks)` blocks to attend."""
    num_kv_heads, num_blocks = scores.shape
    if budget_blocks >= num_blocks:
        return torch.arange(num_blocks, device=scores.device)
    order = torch.argsort(scores, dim=1, descending=True, stable=True)  # stable: ties by block index
    ranks = torch.empty_like(order)
    positions = torch.arange(num_blocks, device=scores.device).expand(num_kv_heads, num_blocks)
    ranks.scatter_(1, order, positions)
    best = ranks.amin(dim=0)  # [num_blocks]: the block's best rank over the heads
    chosen = torch.argsort(best, stable=True)[:budget_blocks]
    return chosen.sort().values


# Up to this budget a head's ranks come from comparing its top keys pairwise (heads x k x k
# booleans: 0.5 MB at k = 256) instead of sorting them: on an H200 the two sorted top-k's sort
# passes took 1.7 ms of a 23 ms W3 128K step (27 us per layer each).
_PAIRWISE_RANK_MAX = 512


def select_from_keys(
    keys: torch.Tensor, budget_blocks: int, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """`select_blocks` from ranking keys [num_kv_heads, num_blocks] int64 (distinct per head, larger
    first: `kernels/sparse_kernels.quest_keys`), with a few launches and no host sync: each head's
    top `budget_blocks` keys give every rank below the budget (a block of best rank >= budget is
    never chosen: head 0's own top list already fills the budget), the best rank per block is a
    scatter-min, and the budget's blocks of least (rank, index) are a top-k of distinct keys.
    The same blocks as `select_blocks` on the scores the keys encode, ascending. `positions`:
    `arange(num_blocks)` on the device, when the caller keeps one (saves launches).
    On CUDA two Triton kernels do it all (`kernels/block_select.py`: 46 us against 169 at 8K blocks
    on an H200)."""
    num_kv_heads, num_blocks = keys.shape
    if positions is None:
        positions = torch.arange(num_blocks, device=keys.device)
    if budget_blocks >= num_blocks:
        return positions
    if keys.is_cuda:
        return select_top_blocks(keys, budget_blocks)
    if budget_blocks <= _PAIRWISE_RANK_MAX:
        top_keys, top = keys.topk(budget_blocks, dim=1, sorted=False)
        # a key's rank in its head: how many of the head's top keys beat it (keys are distinct)
        ranks = (top_keys[:, None, :] > top_keys[:, :, None]).sum(dim=2)
    else:
        top = keys.topk(budget_blocks, dim=1).indices  # [heads, budget], best first: column = rank
        ranks = positions[:budget_blocks].expand(num_kv_heads, budget_blocks)
    best = torch.full((num_blocks,), budget_blocks, dtype=torch.int64, device=keys.device)
    best.scatter_reduce_(0, top.reshape(-1), ranks.reshape(-1), reduce="amin")
    chosen = (best * num_blocks + positions).topk(budget_blocks, largest=False, sorted=False).indices
    # ascending: an order independent of the top-k's implementation and of padding (CUDA graphs
    # pad the block list), which sets the block cache's slots and the decode's summation order
    return chosen.sort().values
