"""Fused elementwise kernels of the decode hot path: RMSNorm (+ residual add), SiLU-and-mul, RoPE.

Shapes:
    rms_norm:     x, residual: [num_tokens, hidden_size]; weight: [hidden_size]
    silu_and_mul: x: [num_tokens, 2 * intermediate_size] -> [num_tokens, intermediate_size]
    apply_rope:   q: [num_tokens, num_heads, head_dim]; k: [num_tokens, num_kv_heads, head_dim];
                  positions: [num_tokens] int64; cos_sin_cache: [max_positions, head_dim] float32
                  = cat(cos[:, :head_dim // 2], sin[:, :head_dim // 2])

Invariants (kernel and reference alike):
- Math is fp32; results are rounded to x's dtype at the points Hugging Face Llama rounds, so a
  model built on these matches transformers up to fp32 reduction order:
  rms_norm: out = weight * to_dtype(x * rsqrt(mean(x^2) + eps));
  silu_and_mul: out = to_dtype(silu(gate)) * up.
- rms_norm with `residual`: residual <- x + residual (in place, rounded to dtype), out =
  rms_norm(new residual); returns (out, residual). vLLM's fused_add_rms_norm. x is untouched.
- apply_rope rotates q and k IN PLACE (neox / rotate_half style: the two halves of head_dim
  pair up) and returns them; q and k may be strided views of a fused qkv output.
"""

from __future__ import annotations

import torch

from kvspill.kernels.pdl import early_reads, pdl_meta, pdl_wait
from kvspill.kernels.triton_compat import tl, triton


def rms_norm_ref(
    x: torch.Tensor,  # [num_tokens, hidden_size]
    weight: torch.Tensor,  # [hidden_size]
    eps: float,
    residual: torch.Tensor | None = None,  # [num_tokens, hidden_size], updated in place
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Torch reference of the kernel (its rounding). The CPU engine uses model/layers.py's
    HF-exact `rms_norm_ref` instead, which keeps transformers' dtype order."""
    if residual is not None:
        residual.add_(x)
        x = residual
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    out = (weight.float() * normed.float()).to(x.dtype)
    return out if residual is None else (out, residual)


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    hidden_size,
    eps,
    stride_x,
    stride_r,
    stride_o,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
    EARLY: tl.constexpr = False,  # the weight read before the wait (read-only: kernels/pdl.py)
):
    # One program per token row; the whole row lives in registers (hidden_size <= BLOCK).
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < hidden_size
    if EARLY:  # while the kernel before ends, not after the row's sum
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    pdl_wait(PDL)
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
    if HAS_RESIDUAL:
        x = x.to(tl.float32) + tl.load(res_ptr + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32)
        x = x.to(res_ptr.dtype.element_ty)
        tl.store(res_ptr + row * stride_r + cols, x, mask=ok)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / hidden_size + eps)
    normed = (xf * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    if not EARLY:
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=ok)


def rms_norm(
    x: torch.Tensor,  # [num_tokens, hidden_size]
    weight: torch.Tensor,  # [hidden_size]
    eps: float,
    residual: torch.Tensor | None = None,  # [num_tokens, hidden_size], updated in place
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Triton wrapper; same contract as `rms_norm_ref`."""
    assert x.dim() == 2 and x.stride(1) == 1, (
        f"x must be [num_tokens, hidden_size] with rows contiguous, got {tuple(x.shape)}"
    )
    num_tokens, hidden_size = x.shape
    assert weight.shape == (hidden_size,) and weight.is_contiguous(), f"weight must be [{hidden_size}]"
    assert weight.device == x.device, f"weight on {weight.device}, x on {x.device}"
    if residual is not None:
        assert residual.shape == x.shape and residual.dtype == x.dtype and residual.stride(1) == 1, (
            f"residual must match x ({x.dtype} {tuple(x.shape)}), got {residual.dtype} {tuple(residual.shape)}"
        )
        assert residual.device == x.device
    out = torch.empty((num_tokens, hidden_size), dtype=x.dtype, device=x.device)
    if num_tokens > 0:
        res = residual if residual is not None else x
        block = triton.next_power_of_2(hidden_size)
        _rms_norm_kernel[(num_tokens,)](
            x,
            res,
            weight,
            out,
            hidden_size,
            eps,
            x.stride(0),
            res.stride(0),
            out.stride(0),
            HAS_RESIDUAL=residual is not None,
            BLOCK=block,
            num_warps=min(16, max(1, block // 512)),
            EARLY=early_reads(x.device),
            **pdl_meta(x.device),
        )
    return out if residual is None else (out, residual)


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """Torch reference: x [num_tokens, 2 * I] -> silu(x[:, :I]) * x[:, I:] ([num_tokens, I])."""
    gate, up = x.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, out_ptr, inter_size, stride_x, stride_o, BLOCK: tl.constexpr, PDL: tl.constexpr = False
):
    # Grid: (num_tokens, cdiv(inter_size, BLOCK)).
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < inter_size
    gate = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
    up = tl.load(x_ptr + row * stride_x + inter_size + cols, mask=ok, other=0.0)
    tl.store(out_ptr + row * stride_o + cols, silu_times(gate, up, out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def silu_times(gate, up, out_dtype: tl.constexpr):
    """silu(gate) * up in out_dtype: silu rounded to out_dtype first, as torch's silu(gate) * up
    rounds it. One definition for the SiLU kernel and gguf_mma_words' gated permutation, so the
    two give the same bits."""
    gate = gate.to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(out_dtype).to(tl.float32)
    return (silu * up.to(tl.float32)).to(out_dtype)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """Triton wrapper; same contract as `silu_and_mul_ref`."""
    assert x.dim() == 2 and x.shape[1] % 2 == 0 and x.stride(1) == 1, (
        f"x must be [num_tokens, 2 * intermediate_size] with rows contiguous, got {tuple(x.shape)}"
    )
    num_tokens, inter_size = x.shape[0], x.shape[1] // 2
    out = torch.empty((num_tokens, inter_size), dtype=x.dtype, device=x.device)
    if num_tokens > 0:
        block = min(1024, triton.next_power_of_2(inter_size))
        _silu_and_mul_kernel[(num_tokens, triton.cdiv(inter_size, block))](
            x, out, inter_size, x.stride(0), out.stride(0), BLOCK=block, **pdl_meta(x.device)
        )
    return out


def apply_rope_ref(
    q: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    positions: torch.Tensor,  # [num_tokens] int64
    cos_sin_cache: torch.Tensor,  # [max_positions, head_dim] float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference of the kernel: x * cos + rotate_half(x) * sin in fp32, in place. The CPU
    engine uses model/layers.py's `apply_rotary_ref`, which rotates in q's dtype as transformers does."""
    half = q.shape[-1] // 2
    cos_sin = cos_sin_cache.index_select(0, positions)  # [num_tokens, head_dim]
    cos = cos_sin[:, None, :half]  # [num_tokens, 1, half]
    sin = cos_sin[:, None, half:]
    for x in (q, k):
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        x.copy_(rotated)
    return q, k


@triton.jit
def _rope_cos_sin(cache_ptr, pos_ptr, token, stride_cache, HALF: tl.constexpr):
    """The token's cos and sin rows ([HALF] fp32 each) from the [max_positions, 2 * HALF] table."""
    pos = tl.load(pos_ptr + token)
    dims = tl.arange(0, HALF)
    return tl.load(cache_ptr + pos * stride_cache + dims), tl.load(
        cache_ptr + pos * stride_cache + HALF + dims
    )


@triton.jit
def rope_halves(x1, x2, cos, sin):
    """The two halves of rows rotated (fp32; cos, sin broadcast over the rows): every RoPE kernel's
    one expression, so they all round alike (kernels/rope_store.py's decode path relies on it)."""
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


@triton.jit
def _rope_rotate(
    x_ptr, token, stride_t, stride_h, num_heads, cos, sin, HALF: tl.constexpr, BLOCK_H: tl.constexpr
):
    """Rotates all heads of one token in place; cos, sin: [HALF] fp32. Returns the two rotated
    halves ([BLOCK_H, HALF] each, in x's dtype) for callers that store them elsewhere too."""
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, HALF)
    ptrs = x_ptr + token * stride_t + heads[:, None] * stride_h + dims[None, :]
    ok = (heads[:, None] < num_heads) & (dims[None, :] < HALF)
    x1 = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)  # x1, x2: [BLOCK_H, HALF]
    x2 = tl.load(ptrs + HALF, mask=ok, other=0.0).to(tl.float32)
    out1, out2 = rope_halves(x1, x2, cos[None, :], sin[None, :])
    out1, out2 = out1.to(x_ptr.dtype.element_ty), out2.to(x_ptr.dtype.element_ty)
    tl.store(ptrs, out1, mask=ok)
    tl.store(ptrs + HALF, out2, mask=ok)
    return out1, out2


@triton.jit
def _rope_kernel(
    q_ptr,
    k_ptr,
    pos_ptr,
    cache_ptr,
    num_heads,
    num_kv_heads,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cache,
    HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    # One program per token: q and k heads share the token's cos/sin row.
    pdl_wait(PDL)
    token = tl.program_id(0).to(tl.int64)
    cos, sin = _rope_cos_sin(cache_ptr, pos_ptr, token, stride_cache, HALF)
    _rope_rotate(q_ptr, token, stride_qt, stride_qh, num_heads, cos, sin, HALF, BLOCK_HQ)
    _rope_rotate(k_ptr, token, stride_kt, stride_kh, num_kv_heads, cos, sin, HALF, BLOCK_HK)


def check_rope_args(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    """The shape, dtype, layout and device contract of the RoPE kernels (asserts, no device sync)."""
    num_tokens, _, head_dim = q.shape
    assert k.dim() == 3 and k.shape[0] == num_tokens and k.shape[2] == head_dim, (
        f"k {tuple(k.shape)} does not match q {tuple(q.shape)}"
    )
    assert q.dtype == k.dtype and q.stride(2) == 1 and k.stride(2) == 1, (
        "q, k: one dtype, head_dim contiguous"
    )
    assert head_dim >= 2 and head_dim & (head_dim - 1) == 0, f"head_dim {head_dim} must be a power of two"
    assert positions.shape == (num_tokens,) and positions.dtype == torch.int64, (
        f"positions must be int64 [{num_tokens}]"
    )
    assert cos_sin_cache.dim() == 2 and cos_sin_cache.shape[1] == head_dim, (
        f"cos_sin_cache must be [max_positions, {head_dim}], got {tuple(cos_sin_cache.shape)}"
    )
    assert cos_sin_cache.dtype == torch.float32 and cos_sin_cache.stride(1) == 1, (
        "cos_sin_cache float32, rows contiguous"
    )
    assert q.device == k.device == positions.device == cos_sin_cache.device, "all tensors on one device"


def apply_rope(
    q: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    positions: torch.Tensor,  # [num_tokens] int64
    cos_sin_cache: torch.Tensor,  # [max_positions, head_dim] float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton wrapper; same contract as `apply_rope_ref`. Positions must be < max_positions
    (not checked on the device: that would sync)."""
    check_rope_args(q, k, positions, cos_sin_cache)
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens > 0:
        _rope_kernel[(num_tokens,)](
            q,
            k,
            positions,
            cos_sin_cache,
            num_heads,
            k.shape[1],
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            cos_sin_cache.stride(0),
            HALF=head_dim // 2,
            BLOCK_HQ=triton.next_power_of_2(num_heads),
            BLOCK_HK=triton.next_power_of_2(k.shape[1]),
            **pdl_meta(q.device),
        )
    return q, k
