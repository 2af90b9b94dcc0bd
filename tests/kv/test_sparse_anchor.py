"""Prompt-guided selection (`attention/sparse/anchor.py`, `--sparse-prompt-window`): the anchor blocks come
first in every head's ranking; the capture keeps exactly the prompt's last queries across prefill
chunks; the anchors are the blocks those queries point at; end to end on the tiny random Llama, a
budget above the cold length stays exact and a small one keeps the anchors in every step's choice."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiered_llm import tiered_llm

from kvspill.attention.sparse.anchor import PromptAnchors, anchor_blocks, boost_keys, build_capture
from kvspill.attention.sparse.select import select_from_keys
from kvspill.kernels.sparse_kernels import ranking_keys
from kvspill.llm import LLM
from kvspill.runner.attention import PagedAttention
from kvspill.sampling_params import SamplingParams


def test_anchor_blocks_come_first_and_the_rest_by_score():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 40, generator=g)
    keys = ranking_keys(scores)
    anchor = torch.zeros(40, dtype=torch.bool)
    low = scores.amax(dim=0).argsort()[:3]  # the three blocks no head ranks high
    anchor[low] = True
    chosen = select_from_keys(boost_keys(keys, anchor), 8)
    assert set(low.tolist()) <= set(chosen.tolist())
    plain = select_from_keys(keys, 8)
    assert not set(low.tolist()) & set(plain.tolist())
    # the other 5 are the 5 best of the plain choice that the anchors did not displace
    rest = [b for b in chosen.tolist() if b not in low.tolist()]
    assert rest == select_from_keys(keys.masked_fill(anchor, -(2**62)), 5).tolist()
    # the boosted keys stay distinct within each head
    boosted = boost_keys(keys, anchor)
    assert all(torch.unique(row).numel() == row.numel() for row in boosted)


def test_anchor_share_in_blocks():
    assert anchor_blocks(0.0, 32) == 0
    assert anchor_blocks(0.5, 32) == 16
    assert anchor_blocks(0.01, 32) == 1  # a share asked for is never rounded away
    assert anchor_blocks(1.0, 32) == 32


@pytest.mark.parametrize(
    ("prompt_len", "start", "n", "rows", "slots"),
    [
        (100, 0, 64, None, None),  # ends before the window (its last 24 positions: 76..99)
        (100, 64, 16, (12, 16), (0, 4)),  # the window's head
        (100, 64, 36, (12, 36), (0, 24)),  # all of it
        (100, 80, 20, (0, 20), (4, 24)),  # the rest, from the next chunk
        (10, 0, 10, (0, 10), (0, 10)),  # a prompt shorter than the window
        (100, 100, 1, None, None),  # a decode row
    ],
)
def test_capture_plan(prompt_len, start, n, rows, slots):
    anchors = PromptAnchors(num_layers=2, window=24, share=0.5, budget_blocks=8, device=torch.device("cpu"))
    plan = anchors.capture_plan(prompt_len, start, n, row0=0)
    if rows is None:
        assert plan is None
        return
    assert plan[0].tolist() == list(range(*rows)) and plan[1].tolist() == list(range(*slots))


def test_anchor_masks_point_at_the_block_the_prompt_queries_match():
    """Block 13's keys are the prompt queries' direction; the masks pick it in every layer."""
    layers, kv_heads, heads, dim, blocks = 2, 2, 4, 16, 30
    anchors = PromptAnchors(layers, window=4, share=0.25, budget_blocks=8, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    direction = torch.randn(dim, generator=g)
    q = direction.expand(4, heads, dim) + 0.1 * torch.randn(4, heads, dim, generator=g)
    capture = build_capture(anchors, [("r", 50, 40, 10, 0)], torch.device("cpu"))
    assert capture is not None
    for layer in range(layers):
        step_q = torch.zeros(10, heads, dim)
        step_q[6:] = q
        capture.store(layer, step_q)
    summary = 0.2 * torch.randn(blocks, 2, kv_heads, dim, generator=g)
    summary[13] += 3 * direction
    masks = anchors.masks("r", (blocks, blocks - 1), 8, lambda layer, lo, hi: summary[lo:hi])
    assert masks is not None and masks.shape == (layers, blocks)
    assert masks.sum(dim=1).tolist() == [2, 2] and masks[:, 13].all()
    assert anchors.masks("r", (blocks, blocks - 1), 8, lambda layer, lo, hi: summary[lo:hi]) is masks  # kept
    assert (
        anchors.masks("r", (blocks, blocks - 1), blocks, lambda layer, lo, hi: summary[lo:hi]) is None
    )  # all fit
    anchors.release("r")
    assert anchors.masks("r", (blocks, blocks - 1), 8, lambda layer, lo, hi: summary[lo:hi]) is None


def test_anchor_masks_scored_in_chunks_equal_one_pass(monkeypatch):
    from kvspill.attention.sparse import anchor as sparse_anchor

    layers, heads, dim, blocks = 2, 4, 8, 50
    g = torch.Generator().manual_seed(2)
    summary = torch.randn(blocks, 2, 2, dim, generator=g)
    q = torch.randn(5, heads, dim, generator=g)
    got = []
    for chunk in (4096, 7):
        monkeypatch.setattr(sparse_anchor, "_SCORE_CHUNK_BLOCKS", chunk)
        anchors = PromptAnchors(layers, window=5, share=0.5, budget_blocks=12, device=torch.device("cpu"))
        capture = build_capture(anchors, [("r", 5, 0, 5, 0)], torch.device("cpu"))
        assert capture is not None
        for layer in range(layers):
            capture.store(layer, q * (layer + 1))
        got.append(anchors.masks("r", (blocks, blocks - 1), 12, lambda layer, lo, hi: summary[lo:hi]))
    assert got[0] is not None and got[1] is not None and got[0].sum() == 12
    assert torch.equal(got[0], got[1])


NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
PROMPT = torch.randint(3, 256, (200,), generator=torch.Generator().manual_seed(3)).tolist()
WINDOW = 24  # spans two 16-token prefill chunks


def _tiered(model_dir, **opts) -> LLM:
    return tiered_llm(model_dir, cold_attention="sparse", sparse_prompt_window=WINDOW, **opts)


def test_a_budget_above_the_cold_length_stays_exact(tiny_llama_dir):
    exact = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", block_size=8, max_model_len=512)
    want = exact.generate([PROMPT], GREEDY)[0].token_ids
    assert _tiered(tiny_llama_dir, sparse_budget_tokens=4096).generate([PROMPT], GREEDY)[0].token_ids == want


def test_capture_keeps_the_prompts_last_queries_and_the_steps_keep_the_anchors(tiny_llama_dir, monkeypatch):
    seen: dict[int, torch.Tensor] = {}  # layer -> q of the last prefill step (the prompt's last 8 rows)
    original = PagedAttention._attend

    def spy(self, layer_idx, q, k, v, rope):
        if q.shape[0] > 1:
            seen[layer_idx] = torch.cat([seen.get(layer_idx, q[:0]), q.detach().clone()])[-WINDOW:]
        return original(self, layer_idx, q, k, v, rope)

    monkeypatch.setattr(PagedAttention, "_attend", spy)
    llm = _tiered(tiny_llama_dir, sparse_budget_tokens=32, sparse_prompt_share=0.5)
    anchors = llm.engine.bundle.runner.cold.anchors
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    from kvspill.attention.cold import sparse as cold_sparse

    original_select = cold_sparse.select_from_keys

    def spy_select(keys, budget, positions=None):
        chosen = original_select(keys, budget, positions)
        kept.append((keys, chosen))
        return chosen

    monkeypatch.setattr(cold_sparse, "select_from_keys", spy_select)
    out = llm.generate([PROMPT], GREEDY)[0].token_ids
    assert len(out) == NEW_TOKENS
    ((req_id, entry),) = anchors.requests.items()  # the runner forgets a request at the next step
    assert entry.filled.all() and entry.queries is not None
    assert len(seen) == llm.engine.bundle.storage.layout.num_layers
    for layer, q in seen.items():
        torch.testing.assert_close(entry.queries[layer], q, rtol=0, atol=0)
    # every decode step kept its 2 anchor blocks (of 4) in every layer's choice
    assert kept
    for keys, chosen in kept:
        marked = np.flatnonzero(((keys >> 32) == (0x7FFFF000)).any(dim=0).numpy())
        assert len(marked) == 2 and set(marked) <= set(chosen.tolist())
    llm.generate([PROMPT[:20]], SamplingParams(max_tokens=2))
    assert req_id not in anchors.requests
