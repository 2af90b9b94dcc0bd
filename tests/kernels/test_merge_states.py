"""merge_attention_states: the rule itself (float64), kernel vs reference, and -inf sides."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.merge_states import merge_attention_states, merge_attention_states_ref


def _partial(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over one key set: scores [N, H, K], values [N, H, K, D] -> (o, lse)."""
    return torch.einsum("nhk,nhkd->nhd", torch.softmax(scores, -1), values), torch.logsumexp(scores, -1)


def test_reference_merge_equals_attention_over_union(device):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn((5, 3, 20), generator=gen, dtype=torch.float64) * 3
    values = torch.randn((5, 3, 20, 16), generator=gen, dtype=torch.float64)
    o_all, lse_all = _partial(scores, values)
    o_a, lse_a = _partial(scores[..., :7], values[:, :, :7])
    o_b, lse_b = _partial(scores[..., 7:], values[:, :, 7:])
    o, lse = merge_attention_states_ref(o_a.float(), lse_a.float(), o_b.float(), lse_b.float())
    torch.testing.assert_close(o.double(), o_all, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), lse_all, atol=1e-6, rtol=1e-6)


def _states(num_tokens, num_heads, head_dim, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    o_a, o_b = (
        torch.randn((num_tokens, num_heads, head_dim), generator=gen).to(dtype).to(device) for _ in range(2)
    )
    lse_a, lse_b = (torch.randn((num_tokens, num_heads), generator=gen).mul(5).to(device) for _ in range(2))
    # Empty sides: a only, b only, both; the empty side's o is NaN and must not leak.
    lse_a[0, 0] = float("-inf")
    o_a[0, 0] = float("nan")
    lse_b[1 % num_tokens, num_heads - 1] = float("-inf")
    o_b[1 % num_tokens, num_heads - 1] = float("nan")
    lse_a[-1, 1 % num_heads] = lse_b[-1, 1 % num_heads] = float("-inf")
    return o_a, lse_a, o_b, lse_b


@pytest.mark.parametrize(
    "dtype, num_tokens, num_heads, head_dim",
    [
        (torch.float32, 4, 3, 16),
        (torch.float16, 3, 8, 64),
        (torch.bfloat16, 5, 32, 128),
        (torch.bfloat16, 2, 40, 64),
    ],
)
def test_kernel_matches_reference(tol, dtype, num_tokens, num_heads, head_dim, device):
    o_a, lse_a, o_b, lse_b = _states(num_tokens, num_heads, head_dim, dtype, device, seed=1)
    o_ref, lse_ref = merge_attention_states_ref(o_a, lse_a, o_b, lse_b)
    o, lse = merge_attention_states(o_a, lse_a, o_b, lse_b)
    assert o.dtype == dtype and lse.dtype == torch.float32
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[dtype])
    torch.testing.assert_close(lse, lse_ref)
    for out, out_lse in ((o, lse), (o_ref, lse_ref)):
        assert not out.isnan().any() and not out_lse.isnan().any()
        assert torch.equal(out[0, 0], o_b[0, 0]) and out_lse[0, 0] == lse_b[0, 0]
        h = num_heads - 1
        assert torch.equal(out[1 % num_tokens, h], o_a[1 % num_tokens, h])
        assert not out[-1, 1 % num_heads].any() and torch.isneginf(out_lse[-1, 1 % num_heads])


def test_merge_of_two_halves_equals_decode_over_union(make_paged_kv, tol, device):
    """Split each seq's blocks into two tables (as GPU and CPU tiers would), attend, merge."""
    block_size, seq_lens = 8, [50, 20]
    paged = make_paged_kv(seq_lens, 2, 32, block_size, torch.float32, seed=7)
    q = torch.randn((2, 8, 32), generator=torch.Generator().manual_seed(8)).to(device)
    full = paged_decode_attention_ref(q, paged.kv_layer, paged.block_tables, paged.seq_lens, 0.2)
    first_blocks = [3, 1]  # whole blocks in the first half; the rest (ending mid-block) in the second
    first_table = paged.block_tables.clone()
    second_table = torch.zeros_like(paged.block_tables)
    for s, n in enumerate(first_blocks):
        second_table[s, : paged.block_tables.shape[1] - n] = paged.block_tables[s, n:]
    first_lens = torch.tensor([n * block_size for n in first_blocks], dtype=torch.int32, device=device)
    second_lens = paged.seq_lens - first_lens
    # The second half's keys are not at positions 0.. of a seq, but decode attends to all of them.
    part_a = paged_decode_attention(
        q, paged.kv_layer, first_table, first_lens, 0.2, num_splits=2, min_split_tokens=16
    )
    part_b = paged_decode_attention(q, paged.kv_layer, second_table, second_lens, 0.2, num_splits=1)
    o, lse = merge_attention_states(*part_a, *part_b)
    torch.testing.assert_close(o, full[0], **tol[torch.float32])
    torch.testing.assert_close(lse, full[1], **tol[torch.float32])
