"""The sparse-quality harness's attention: the dense-mask form of a sparse decode row."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvspill.bench.sparse_quality import SparseDecodeAttention


def _qkv(num_tokens: int = 96, heads: int = 4, kv_heads: int = 2, dim: int = 16) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(num_tokens, heads, dim, generator=g)
    k = torch.randn(num_tokens, kv_heads, dim, generator=g)
    v = torch.randn(num_tokens, kv_heads, dim, generator=g)
    return q, k, v


def _causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    qh, kh, vh = (x.transpose(0, 1)[None] for x in (q, k, v))
    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)[0].transpose(0, 1)


def test_a_budget_that_holds_every_cold_block_is_exact() -> None:
    q, k, v = _qkv()
    attention = SparseDecodeAttention(budget_tokens=96, block_size=8, sink_blocks=1, hot_window=16)
    torch.testing.assert_close(attention(3, q, k, v), _causal(q, k, v))
    assert attention.dropping_rows is not None and not attention.dropping_rows.any()


def test_a_small_budget_drops_blocks_except_in_the_dense_layers() -> None:
    q, k, v = _qkv()
    attention = SparseDecodeAttention(16, block_size=8, sink_blocks=1, hot_window=16, dense_layers=2)
    torch.testing.assert_close(attention(1, q, k, v), _causal(q, k, v))  # a dense layer
    sparse = attention(2, q, k, v)
    rows = attention.dropping_rows
    assert rows is not None and rows.any()
    mask = attention.mask(q, k)
    kept = mask[rows].sum(dim=1)
    causal = torch.arange(96)[rows] + 1
    assert (kept < causal).all()  # every dropping row left some cold block out
    assert not torch.allclose(sparse[rows], _causal(q, k, v)[rows])
    torch.testing.assert_close(sparse[~rows], _causal(q, k, v)[~rows])


def test_the_oracle_keeps_the_block_with_the_planted_key() -> None:
    q, k, v = _qkv()
    k[40] = 20 * q[-1, :2].mean(dim=0)  # block 5 (of 8 tokens) holds a key the last row's kv head 0 likes
    attention = SparseDecodeAttention(8, block_size=8, sink_blocks=1, hot_window=16, score="oracle")
    mask = attention.mask(q, k)
    assert mask[-1, 40:48].all()
    assert mask[-1, :72].sum() == 16  # of blocks 0-8 (then the hot window): the sink and the chosen one


def test_halves_of_two_token_blocks_score_like_the_oracle() -> None:
    # a one-token box has no width: its estimate is q . k itself, so the larger half's score is the
    # block's true max of q . k over the group, which is the oracle's score
    q, k, _ = _qkv()
    kb = k.view(48, 2, 2, 16)
    halves = SparseDecodeAttention(8, block_size=2, sink_blocks=1, hot_window=16, score="halves")._scorer(
        q, kb
    )
    oracle = SparseDecodeAttention(8, block_size=2, sink_blocks=1, hot_window=16, score="oracle")._scorer(
        q, kb
    )
    for t in (30, 95):
        torch.testing.assert_close(halves(t, 1, 40), oracle(t, 1, 40), rtol=1e-4, atol=1e-4)
