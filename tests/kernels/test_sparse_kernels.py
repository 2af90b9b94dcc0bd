"""Sparse attention's selection kernels (kernels/sparse_kernels.py) and the cache's gather against
their torch references: ranking keys from summaries in two tiers, the few-launch top-k selection
against the stable-sort definition (ties included), and the cache's slot bookkeeping over a run
of steps. Triton's interpreter on the CPU, the GPU where there is one."""

from __future__ import annotations

import pytest
import torch

from kvspill.attention.sparse.anchor import boost_keys
from kvspill.attention.sparse.cache import cache_update_ref
from kvspill.attention.sparse.select import block_scores_ref, select_blocks, select_from_keys
from kvspill.kernels.block_select import select_top_blocks
from kvspill.kernels.sparse_kernels import block_keys, cache_update, pad_keys, ranking_keys
from kvspill.kernels.uva_gather import gather_blocks_to
from kvspill.types import TIER_CPU, TIER_DISK

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_block_keys_rank_like_the_reference_over_two_tiers():
    g = torch.Generator().manual_seed(0)
    num_heads, kv_heads, dim, layers = 8, 2, 16, 3
    cpu = torch.randn(20, layers, 2, kv_heads, dim, generator=g)
    disk = torch.randn(12, layers, 2, kv_heads, dim, generator=g)
    cpu[:, :, 1] = cpu[:, :, 0] + cpu[:, :, 1].abs()  # max >= min per channel
    disk[:, :, 1] = disk[:, :, 0] + disk[:, :, 1].abs()
    tiers = torch.tensor([TIER_CPU] * 5 + [TIER_DISK] * 4 + [TIER_CPU] * 3)
    ids = torch.tensor([3, 0, 19, 7, 7, 11, 2, 5, 0, 12, 1, 4])
    q = torch.randn(num_heads, dim, generator=g)
    layer = 1
    summary = torch.stack(
        [(cpu if t == TIER_CPU else disk)[i, layer] for t, i in zip(tiers, ids, strict=True)]
    )
    want = ranking_keys(block_scores_ref(q[None], summary))
    dev = lambda t: t.to(DEVICE)  # noqa: E731
    got = block_keys(dev(q), dev(cpu)[:, layer], dev(disk)[:, layer], dev(tiers), dev(ids)).cpu()
    # same order of blocks per head (the scores agree to float rounding; no near-ties here)
    assert torch.equal(got.argsort(dim=1), want.argsort(dim=1))
    assert torch.equal(got & 0xFFFFFFFF, want & 0xFFFFFFFF)  # low bits: n - 1 - block index


# The planted -inf summary makes inf - inf inside the kernel: Triton's CPU interpreter (numpy)
# warns; the test checks the key it gives all the same.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_block_keys_padding_past_num_valid_is_never_read_and_ranks_last():
    """CUDA graphs pass fixed-size block lists: blocks past `num_valid` are padding. Their ids
    point out of the summaries (a read would fault or show); the real blocks' keys equal the
    unpadded call's ranking, and a top-k of at most `num_valid` picks real blocks only."""
    g = torch.Generator().manual_seed(3)
    num_heads, kv_heads, dim, layers, n_real, n_pad = 4, 2, 16, 2, 9, 7
    cpu = torch.randn(10, layers, 2, kv_heads, dim, generator=g)
    cpu[:, :, 1] = cpu[:, :, 0] + cpu[:, :, 1].abs()
    cpu[4, 1, 1] = float("-inf")  # a real block scoring -inf still outranks padding
    ids = torch.cat([torch.randperm(10, generator=g)[:n_real], torch.full((n_pad,), 10**9)])
    tiers = torch.full((n_real + n_pad,), TIER_CPU)
    q = torch.randn(num_heads, dim, generator=g)
    dev = lambda t: t.to(DEVICE)  # noqa: E731
    layer = dev(cpu)[:, 1]
    count = torch.tensor(n_real, device=DEVICE)
    got = block_keys(dev(q), layer, None, dev(tiers), dev(ids), num_valid=count).cpu()
    alone = block_keys(dev(q), layer, None, dev(tiers[:n_real]), dev(ids[:n_real])).cpu()
    assert torch.equal(got[:, :n_real].argsort(dim=1), alone.argsort(dim=1))
    assert bool((got[:, n_real:].amax(dim=1) < got[:, :n_real].amin(dim=1)).all())
    for budget in (1, 4, n_real):
        assert int(select_from_keys(got, budget).max()) < n_real


@pytest.mark.parametrize(
    ("num_blocks", "budget"),
    [(40, 1), (40, 3), (40, 7), (40, 40), (1200, 300), (1200, 600)],  # 600: ranks by sorting
)
def test_selection_from_keys_equals_the_stable_sort_definition(num_blocks, budget):
    g = torch.Generator().manual_seed(budget)
    scores = torch.randn(4, num_blocks, generator=g)
    scores[1, 5:15] = 0.5  # ties within a head
    scores[2] = scores[0]  # two heads alike
    scores[3, 7] = -0.0  # -0.0 ties with +0.0
    scores[3, 8] = 0.0
    scores[0, 20], scores[0, 30] = 3.0, 3.0 * (1 + 2**-14)  # tie at SCORE_BITS: block 20 first
    assert torch.equal(select_from_keys(ranking_keys(scores), budget), select_blocks(scores, budget))


def _tied_scores(num_heads: int, num_blocks: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(num_heads, num_blocks, generator=g)
    scores[1, 5:15] = 0.5  # ties within a head
    scores[2] = scores[0]  # two heads alike
    scores[3, 7] = -0.0  # -0.0 ties with +0.0
    scores[3, 8] = 0.0
    scores[0, 20], scores[0, 30] = 3.0, 3.0 * (1 + 2**-14)  # tie at SCORE_BITS: block 20 first
    return scores


@pytest.mark.parametrize(
    ("num_blocks", "budget", "register_blocks"),
    [(40, 1, 8192), (40, 7, 8192), (40, 39, 8192), (1200, 300, 8192), (1200, 600, 8192),
     (1200, 300, 256), (1200, 17, 128), (1040, 40, 256), (4000, 100, 256), (1200, 250, 256)],
    # 600: ranks by sorting. register_blocks < num_blocks: chunks' top keys first (the last of
    # 1040 has 16 blocks: filler; 4000: 1600 candidates, searched in chunks), or the search over
    # chunks (300, 250: no fewer keys)
)  # fmt: skip
@pytest.mark.slow
def test_selection_kernels_equal_the_stable_sort_definition(num_blocks, budget, register_blocks):
    scores = _tied_scores(4, num_blocks, budget)
    got = select_top_blocks(ranking_keys(scores).to(DEVICE), budget, register_blocks).cpu()
    assert torch.equal(got, select_blocks(scores, budget))


@pytest.mark.parametrize("register_blocks", [8192, 256])
def test_selection_kernels_with_three_kv_heads(register_blocks):
    """A head count that is not a power of two (SmolLM2 has 3 kv heads): the union's codes
    (rank * heads + head) and the entries' padding to 4 heads."""
    scores = _tied_scores(4, 1500, 7)[:3].contiguous()
    for budget in (5, 64, 333):
        got = select_top_blocks(ranking_keys(scores).to(DEVICE), budget, register_blocks).cpu()
        assert torch.equal(got, select_blocks(scores, budget))


def test_scores_closer_than_score_bits_tie_and_go_to_the_lower_block():
    scores = torch.zeros(1, 40)
    scores[0, 30], scores[0, 20] = 3.0 * (1 + 2**-14), 3.0  # the later block a hair higher
    assert select_blocks(scores, 1).tolist() == [20]
    assert select_top_blocks(ranking_keys(scores).to(DEVICE), 1).cpu().tolist() == [20]
    scores[0, 30] = 3.0 * (1 + 2**-10)  # 2**-10 apart: no tie
    assert select_blocks(scores, 1).tolist() == [30]
    assert select_top_blocks(ranking_keys(scores).to(DEVICE), 1).cpu().tolist() == [30]


@pytest.mark.parametrize("register_blocks", [8192, 128, 64])
def test_selection_kernels_with_every_score_tied_and_padding(register_blocks):
    """All real scores equal in every head (the search's ties span whole heads, and the union's
    ties span every ranked block), then padding past `num_valid` (never chosen)."""
    num_blocks, n_real, budget = 300, 250, 70
    positions, count = torch.arange(num_blocks), torch.tensor(n_real)
    keys = pad_keys(ranking_keys(torch.zeros(4, num_blocks)), count, positions)
    got = select_top_blocks(keys.to(DEVICE), budget, register_blocks).cpu()
    assert torch.equal(got, torch.arange(budget))  # every head ranks by index: the first 70
    scores = torch.cat([_tied_scores(4, n_real, 5), torch.full((4, num_blocks - n_real), 9.0)], 1)
    keys = pad_keys(ranking_keys(scores), count, positions)  # padding would outscore every block
    got = select_top_blocks(keys.to(DEVICE), budget, register_blocks).cpu()
    assert torch.equal(got, select_blocks(scores[:, :n_real], budget))


@pytest.mark.parametrize("register_blocks", [8192, 128])
def test_selection_kernels_keep_the_anchor_blocks_first(register_blocks):
    """Keys raised by `attention/sparse/anchor.boost_keys` (the prompt's anchor blocks) rank above every
    score in the kernels' 20-bit searches too, padding still last: the same blocks as the
    torch selection of the same keys."""
    num_blocks, n_real, budget = 300, 280, 40
    positions, count = torch.arange(num_blocks), torch.tensor(n_real)
    scores = _tied_scores(4, num_blocks, 9)
    scores[:, 100:110] = float("inf")  # the largest real high half: still below the anchors'
    anchor = torch.zeros(num_blocks, dtype=torch.bool)
    anchor[torch.tensor([3, 57, 199, 201, 279])] = True
    keys = boost_keys(pad_keys(ranking_keys(scores), count, positions), anchor)
    got = select_top_blocks(keys.to(DEVICE), budget, register_blocks).cpu()
    assert torch.equal(got, select_from_keys(keys, budget))
    assert set(anchor.nonzero().flatten().tolist()) <= set(got.tolist())
    assert set(range(100, 110)) <= set(got.tolist()) and got.max() < n_real


def test_cache_update_kernel_equals_the_reference_over_steps():
    g = torch.Generator().manual_seed(1)
    num_slots, max_blocks, base = 6, 30, 12
    state = {
        name: (
            torch.full((max_blocks,), -1, dtype=torch.int32),
            torch.full((num_slots,), -1, dtype=torch.int64),
        )
        for name in ("ref", "kernel")
    }
    scratch = torch.zeros((2, num_slots), dtype=torch.int32, device=DEVICE)
    logical = torch.randperm(max_blocks, generator=g)  # a cold list's logical blocks, shuffled
    ids = torch.randperm(100, generator=g)[:max_blocks]  # and their ids in the tier
    kernel_state = tuple(t.to(DEVICE) for t in state["kernel"])
    copied, misses = torch.zeros((), dtype=torch.int64, device=DEVICE), 0
    for step in range(12):
        k = int(torch.randint(1, num_slots + 1, (1,), generator=g))
        pool = 10 if step < 6 else max_blocks  # first steps revisit few blocks: hits
        positions = torch.randperm(pool, generator=g)[:k]  # into the cold list
        chosen = logical[positions]
        want_table, want_copy = cache_update_ref(*state["ref"], chosen, base)
        got_table, got_copy, got_ids = cache_update(
            *kernel_state, positions.to(DEVICE), logical.to(DEVICE), ids.to(DEVICE), scratch, base, copied
        )
        misses += int((want_copy >= 0).sum())
        assert int(copied) == misses
        assert torch.equal(got_table.cpu(), want_table) and torch.equal(got_copy.cpu(), want_copy)
        assert torch.equal(got_ids.cpu(), ids[positions])
        assert torch.equal(kernel_state[0].cpu(), state["ref"][0])
        assert torch.equal(kernel_state[1].cpu(), state["ref"][1])
        # invariants: each chosen block has its own slot, holding it; copies only for misses
        slot_of, slot_block = state["ref"]
        assert len(set(want_table.tolist())) == k
        assert torch.equal(slot_block[want_table.long() - base], chosen)
        assert torch.equal(slot_of[chosen].long() + base, want_table.long())


@pytest.mark.parametrize("use_kernel", [True, False])
def test_gather_to_copies_only_entries_with_a_slot(use_kernel):
    g = torch.Generator().manual_seed(2)
    pool = torch.randn(9, 3, 2, 4, 2, 8, generator=g)
    if torch.cuda.is_available():
        pool = pool.pin_memory()
    src = pool[:, 2]  # one layer's strided view
    dst = torch.zeros(5, *src.shape[1:], device=DEVICE)
    ids = torch.tensor([4, 8, 1, 0], device=DEVICE)
    slots = torch.tensor([3, -1, 0, -1], device=DEVICE)
    gather_blocks_to(src, ids, slots, dst, use_kernel=use_kernel)
    out = dst.cpu()
    assert torch.equal(out[3], src[4]) and torch.equal(out[0], src[1])
    assert not out[[1, 2, 4]].any()
