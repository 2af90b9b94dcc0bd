"""Merge two partial attention results over disjoint key sets by their log-sum-exp.

Shapes:
    o_a, o_b:     [num_tokens, num_heads, head_dim]   (any float dtype; the result takes o_a's)
    lse_a, lse_b: [num_tokens, num_heads] float32, natural-log logsumexp of each part's scores
    returns o: [num_tokens, num_heads, head_dim], lse: [num_tokens, num_heads] float32

    lse = log(exp(lse_a) + exp(lse_b))
    o   = (exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b)

Invariants:
- A side with lse = -inf (no keys) contributes nothing, even if its o holds NaN: the result is
  the other side exactly (o converted through fp32 only). Both -inf gives o = 0, lse = -inf.
- Outputs are new tensors; inputs are not modified. Math is fp32.
The KV tiers use this to combine GPU and CPU partials; the decode kernel's stage 2 is the
same rule over many splits.
"""

from __future__ import annotations

import torch

from kvspill.kernels.triton_compat import tl, triton


def merge_attention_states_ref(
    o_a: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    lse_a: torch.Tensor,  # [num_tokens, num_heads] float32
    o_b: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    lse_b: torch.Tensor,  # [num_tokens, num_heads] float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference (also the CPU engine's path)."""
    m = torch.maximum(lse_a, lse_b)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w_a = torch.exp(lse_a - m_safe)  # 0 where lse_a is -inf
    w_b = torch.exp(lse_b - m_safe)
    denom = w_a + w_b
    has_keys = denom > 0
    denom_safe = torch.where(has_keys, denom, torch.ones_like(denom))
    part_a = torch.where((w_a > 0)[..., None], o_a.float() * (w_a / denom_safe)[..., None], 0.0)
    part_b = torch.where((w_b > 0)[..., None], o_b.float() * (w_b / denom_safe)[..., None], 0.0)
    o = (part_a + part_b).to(o_a.dtype)
    lse = torch.where(has_keys, m_safe + torch.log(denom_safe), torch.full_like(m, float("-inf")))
    return o, lse


@triton.jit
def _merge_kernel(
    o_a_ptr,
    lse_a_ptr,
    o_b_ptr,
    lse_b_ptr,
    o_ptr,
    lse_ptr,
    num_heads,
    stride_oat,
    stride_oah,
    stride_lat,
    stride_lah,
    stride_obt,
    stride_obh,
    stride_lbt,
    stride_lbh,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    # Grid: (num_tokens, cdiv(num_heads, BLOCK_H)); one program merges BLOCK_H heads of a token.
    token = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    dims = tl.arange(0, HEAD_DIM)
    lse_a = tl.load(lse_a_ptr + token * stride_lat + heads * stride_lah, mask=head_ok, other=float("-inf"))
    lse_b = tl.load(lse_b_ptr + token * stride_lbt + heads * stride_lbh, mask=head_ok, other=float("-inf"))
    m = tl.maximum(lse_a, lse_b)
    m_safe = tl.where(m > float("-inf"), m, 0.0)
    w_a = tl.exp(lse_a - m_safe)
    w_b = tl.exp(lse_b - m_safe)
    denom = w_a + w_b
    denom_safe = tl.where(denom > 0, denom, 1.0)
    use_a = (w_a > 0) & head_ok
    use_b = (w_b > 0) & head_ok
    o_a = tl.load(
        o_a_ptr + token * stride_oat + heads[:, None] * stride_oah + dims[None, :],
        mask=use_a[:, None],
        other=0.0,
    ).to(tl.float32)  # o_a: [BLOCK_H, HEAD_DIM]
    o_b = tl.load(
        o_b_ptr + token * stride_obt + heads[:, None] * stride_obh + dims[None, :],
        mask=use_b[:, None],
        other=0.0,
    ).to(tl.float32)
    o = o_a * (w_a / denom_safe)[:, None] + o_b * (w_b / denom_safe)[:, None]
    lse = tl.where(denom > 0, m_safe + tl.log(denom_safe), float("-inf"))
    tl.store(
        o_ptr + token * stride_ot + heads[:, None] * stride_oh + dims[None, :],
        o.to(o_ptr.dtype.element_ty),
        mask=head_ok[:, None],
    )
    tl.store(lse_ptr + token * stride_lt + heads * stride_lh, lse, mask=head_ok)


def merge_attention_states(
    o_a: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    lse_a: torch.Tensor,  # [num_tokens, num_heads] float32
    o_b: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    lse_b: torch.Tensor,  # [num_tokens, num_heads] float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton wrapper; same contract as `merge_attention_states_ref`."""
    num_tokens, num_heads, head_dim = o_a.shape
    assert o_b.shape == o_a.shape, f"o_a {tuple(o_a.shape)} and o_b {tuple(o_b.shape)} differ"
    assert lse_a.shape == lse_b.shape == (num_tokens, num_heads), (
        f"lse shapes {tuple(lse_a.shape)}, {tuple(lse_b.shape)} != {(num_tokens, num_heads)}"
    )
    assert lse_a.dtype == lse_b.dtype == torch.float32, (
        f"lse must be float32, got {lse_a.dtype}, {lse_b.dtype}"
    )
    assert o_a.stride(2) == 1 and o_b.stride(2) == 1, "head_dim must be contiguous"
    assert head_dim & (head_dim - 1) == 0, f"head_dim {head_dim} must be a power of two"
    assert o_a.device == o_b.device == lse_a.device == lse_b.device, "all tensors on one device"
    o = torch.empty_like(o_a, memory_format=torch.contiguous_format)
    lse = torch.empty((num_tokens, num_heads), dtype=torch.float32, device=o_a.device)
    if num_tokens == 0:
        return o, lse
    block_h = min(triton.next_power_of_2(num_heads), max(1, 4096 // head_dim))
    _merge_kernel[(num_tokens, triton.cdiv(num_heads, block_h))](
        o_a,
        lse_a,
        o_b,
        lse_b,
        o,
        lse,
        num_heads,
        o_a.stride(0),
        o_a.stride(1),
        lse_a.stride(0),
        lse_a.stride(1),
        o_b.stride(0),
        o_b.stride(1),
        lse_b.stride(0),
        lse_b.stride(1),
        o.stride(0),
        o.stride(1),
        lse.stride(0),
        lse.stride(1),
        HEAD_DIM=head_dim,
        BLOCK_H=block_h,
    )
    return o, lse
