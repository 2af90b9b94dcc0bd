"""Query-aware selection of cold blocks: score block summaries, keep a token budget.

A block's summary is the per-channel min and max of its keys (`storage/summary.py`, as in
Quest), read as a box: center c = (kmax + kmin) / 2 and half-width r = (kmax - kmin) / 2. The
score of a block for one query row q and kv head h estimates the block's largest q . k:

    score(q, block) = q . c + || q * r ||_2                   (`block_scores`)

Quest's own score is the box's upper bound, q . c + sum_d |q_d| r_d (`quest_bounds`). On real
weights the bound is loose where it matters: RoPE's fast channels turn within a 16-token block,
so every block's box is wide in them and their |q_d| r_d terms, alike for all blocks, drown the
slow channels that tell a needle's block from the rest. The L2 norm of q * r is the size of a
typical deviation from the center (keys vary in many channels at once, not each at its extreme),
not the worst case. Measured with `kvspill eval` on SmolLM2 (NIAH, 4 needles, 2K tokens, budget
1/8: 16 of ~110 cold blocks, 20 samples): the bound scored 55 against exact attention's 75; the
estimate 75, the same samples as exact (bench/results/2026-11-27-cpu-sparse-score/). With the
true per-block max of q . k (an oracle) the failing samples pass as well.

A kv head's score of a block is the maximum over its GQA query group and the step's query rows
of the sequence. The gather moves whole blocks (all kv heads), so one block list serves every
head of a sequence: each head ranks the blocks by its score (ties: lower block index first), a
block's priority is its best rank over the heads, and the `budget_blocks` blocks of best
priority are kept (ties again by block index). So each head's top blocks come in round-robin and
no head's scale drowns the others. Deterministic given the inputs: stable sorts only, no
randomness; the result is in ascending block order.

Shapes: q [num_rows, num_heads, head_dim]; summary [num_blocks, 2, num_kv_heads, head_dim]
(dim 1: 0 = min, 1 = max); scores [num_kv_heads, num_blocks] float32.
"""

from __future__ import annotations

import torch

from kvspill.kernels.block_select import select_top_blocks
from kvspill.kernels.sparse_kernels import score_bits


def _group_rows(q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """q [rows, heads, dim] -> [kv, rows * group, dim]: every query row of a kv head's group."""
    num_rows, _, head_dim = q.shape
    return q.view(num_rows, num_kv_heads, -1, head_dim).transpose(0, 1).reshape(num_kv_heads, -1, head_dim)


def block_scores_ref(q: torch.Tensor, summary: torch.Tensor) -> torch.Tensor:
    """Torch reference of `block_scores`, straight from the definition (fp32): [num_kv_heads, num_blocks]."""
    qh = _group_rows(q.float(), summary.shape[2])  # [kv, rows*group, dim]
    kmin, kmax = (
        summary[:, 0].float().transpose(0, 1),
        summary[:, 1].float().transpose(0, 1),
    )  # [kv, blocks, dim]
    center, half = (kmax + kmin) / 2, (kmax - kmin) / 2
    q_, c_, r_ = (
        qh[:, None, :, :],
        center[:, :, None, :],
        half[:, :, None, :],
    )  # [kv, blocks, rows*group, dim]
    score = (q_ * c_).sum(-1) + (q_ * r_).square().sum(-1).sqrt()
    return score.amax(dim=2)


def block_scores(q: torch.Tensor, summary: torch.Tensor) -> torch.Tensor:
    """[num_kv_heads, num_blocks] float32 (see the module docstring), two batched fp32 matmuls
    per call; the GPU path computes the same in `kernels/sparse_kernels.block_keys`."""
    qh = _group_rows(q.float(), summary.shape[2])
    kmin = summary[:, 0].float().transpose(0, 1)  # [kv, blocks, dim]
    kmax = summary[:, 1].float().transpose(0, 1)
    center = torch.bmm((kmax + kmin) / 2, qh.transpose(1, 2))  # [kv, blocks, rows*group]
    spread = torch.bmm(((kmax - kmin) / 2).square(), qh.square().transpose(1, 2)).clamp_(min=0).sqrt_()
    return (center + spread).amax(dim=2)


def quest_bounds(q: torch.Tensor, summary: torch.Tensor) -> torch.Tensor:
    """Quest's score, the box's upper bound of q . k: sum_d max(q_d * kmin_d, q_d * kmax_d) =
    kmax . relu(q) + kmin . min(q, 0), [num_kv_heads, num_blocks] float32. Not the engine's score
    (see the module docstring); `python -m kvspill.bench.sparse_quality --score quest` measures it."""
    qh = _group_rows(q.float(), summary.shape[2])
    pos = qh.clamp(min=0)
    kmin = summary[:, 0].float().transpose(0, 1)
    kmax = summary[:, 1].float().transpose(0, 1)
    bound = torch.baddbmm(torch.bmm(kmax, pos.transpose(1, 2)), kmin, (qh - pos).transpose(1, 2))
    return bound.amax(dim=2)


def select_blocks(scores: torch.Tensor, budget_blocks: int) -> torch.Tensor:
    """Indices (int64, ascending) of the `min(budget_blocks, num_blocks)` blocks to attend."""
    num_kv_heads, num_blocks = scores.shape
    if budget_blocks >= num_blocks:
        return torch.arange(num_blocks, device=scores.device)
    # scores compare at SCORE_BITS bits (`score_bits`); stable: ties by block index
    order = torch.argsort(score_bits(scores), dim=1, descending=True, stable=True)
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
    first: `kernels/sparse_kernels.block_keys`), with a few launches and no host sync: each head's
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
