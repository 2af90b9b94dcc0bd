"""Elementwise building blocks shared by every model family: RMSNorm, SiLU-and-mul, RoPE.

These are the swap points for fused CUDA kernels; each is plain torch here and matches
Hugging Face numerics (norm statistics in float32, cast back before the weight multiply).

RoPE invariants:
- Frequencies come from transformers (`ROPE_INIT_FUNCTIONS`, or the model's own default
  function), never re-derived here, with the attention scaling factor they return (yarn /
  longrope mscale) multiplied into cos and sin as HF does.
- The table is `cos_sin_cache: [max_positions, head_dim]` float32 =
  cat(cos[:, :head_dim/2], sin[:, :head_dim/2]), the layout the fused kernel takes;
  positions index its rows. It is built once per model for `max_model_len`.
- Length-dependent types are fixed at start, so a cached key never changes meaning:
  "dynamic" uses HF's table for seq_len = max_positions (the unscaled table whenever
  max_positions <= the original max_position_embeddings, exactly what HF computes there);
  "longrope" uses the long factors when max_positions > original_max_position_embeddings,
  else the short ones (HF switches per call on the longest position seen).
"""

from __future__ import annotations

import copy
from typing import Any, overload

import torch
from torch import Tensor, nn
from transformers import PretrainedConfig

from kvspill.env import norm_handoff_on
from kvspill.errors import UnsupportedModelError
from kvspill.kernels import cpu_decode_ops as cpu_ops
from kvspill.kernels.fp8_gemv import GemvFusion, dense_gemv
from kvspill.kernels.fused_ops import apply_rope as fused_apply_rope
from kvspill.kernels.fused_ops import rms_norm as fused_rms_norm
from kvspill.kernels.fused_ops import silu_and_mul as fused_silu_and_mul
from kvspill.kernels.fused_ops import silu_and_mul_ref

# Tokens up to which a CUDA bf16 / fp16 DenseLinear takes the Triton GEMV instead of cuBLAS.
DENSE_GEMV_MAX_TOKENS = 1
# A CPU step of this many tokens or more over fp16 weights runs its activations in fp32, each
# weight widened for its call (`cpu_widens`): on CPUs without AVX-512 FP16, oneDNN's fp16 matmul
# costs about one GEMV a token (a 32-token 1536 x 576 projection 1.9 ms against 0.6 widened, 2
# threads) and fp16 elementwise ops are slow too; fewer tokens keep fp16, whose GEMV reads half
# the bytes. The embedded model's 512-token prefill 5.3 -> 1.2 s (bench/results/2026-12-07-cpu-prefill-fp32/).
CPU_WIDE_MIN_TOKENS = 8


def cpu_wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a CPU step of CPU_WIDE_MIN_TOKENS tokens or more computes in, over `dtype` weights
    (what the CPU's prefill rate is measured in: hardware/cpu_rates.py)."""
    return torch.float32 if dtype == torch.float16 else dtype


def cpu_widens(x: Tensor) -> bool:
    """Whether a step's hidden states x [num_tokens, hidden] go to fp32 (CPU_WIDE_MIN_TOKENS)."""
    return (
        x.device.type == "cpu"
        and cpu_wide_dtype(x.dtype) != x.dtype
        and x.dim() == 2
        and x.shape[0] >= CPU_WIDE_MIN_TOKENS
    )


def widened_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T (+ bias) on the CPU where x is wider than the weight (a `cpu_widens` step), in
    x's dtype: the weight widened for the call, or for a few rows (the lm_head's sampled ones) x
    narrowed to the weight's dtype and the result widened back."""
    if x.numel() // x.shape[-1] >= CPU_WIDE_MIN_TOKENS:  # rows
        return nn.functional.linear(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))
    return nn.functional.linear(x.to(weight.dtype), weight, bias).to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with vLLM's fused residual-add form.

    norm(x) -> out; norm(x, residual) -> (out, new_residual) with new_residual = x + residual
    (added in x's dtype, as HF's decoder layers do) and out = norm(new_residual).
    """

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))
        self.variance_epsilon = eps

    @overload
    def forward(self, x: Tensor, residual: None = None) -> Tensor: ...

    @overload
    def forward(self, x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]: ...

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        # x, residual: [..., hidden_size]
        if x.is_cuda and x.dim() == 2:  # one fused kernel instead of six (add, pow, mean, ...)
            return fused_rms_norm(x, self.weight, self.variance_epsilon, residual)
        # The CPU kernel for fp16 / bf16 rows (a decode step's); fp32 rows (a widened CPU prefill)
        # keep torch's ops, equal to transformers' bit for bit: the kernel sums in another order.
        if not x.is_cuda and x.dtype != torch.float32 and (done := self._on_host(x, residual)) is not None:
            return done
        if residual is not None:
            x = x + residual
            residual = x
        out = rms_norm_ref(x, self.weight, self.variance_epsilon)
        return out if residual is None else (out, residual)

    def _on_host(self, x: Tensor, residual: Tensor | None) -> Tensor | tuple[Tensor, Tensor] | None:
        """`forward` by the CPU kernel (one call for the add and the norm's six ops), or None where
        it does not apply."""
        d = x.shape[-1]
        rows = x.reshape(-1, d)
        done = cpu_ops.add_rms_norm(
            rows, None if residual is None else residual.reshape(-1, d), self.weight, self.variance_epsilon
        )
        if done is None:
            return None
        out, added = done
        if added is None:
            return out.view(x.shape)
        return out.view(x.shape), added.view(x.shape)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


def rms_norm_ref(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x: [..., d], weight: [d] -> [..., d] in x's dtype (weight dtype when wider)."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(input_dtype)


def dense_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T (+ bias). One decode token on CUDA (bf16 / fp16, 2-D x) takes
    kernels/fp8_gemv.dense_gemv: 1.0-1.4x cuBLAS's speed on the 1B / 8B shapes, and it launches
    with PDL (kernels/pdl.py), prefetching its weights while the kernel before it finishes; W1's
    8K decode 804 -> 955 tok/s on an H200 (bench/results/2026-12-03-h200-pdl-dense-gemv)."""
    if (
        x.is_cuda
        and x.dim() == 2
        and 0 < x.shape[0] <= DENSE_GEMV_MAX_TOKENS
        and x.dtype == weight.dtype
        and x.dtype in (torch.bfloat16, torch.float16)
        and x.stride(1) == 1
        and weight.stride(1) == 1
    ):
        return dense_gemv(x, weight, bias)
    if x.dtype != weight.dtype and not x.is_cuda:
        return widened_linear(x, weight, bias)
    return nn.functional.linear(x, weight, bias)


class DenseLinear(nn.Linear):
    """nn.Linear whose forward is `dense_linear` (same parameters, same state dict)."""

    def forward(self, x: Tensor) -> Tensor:
        return dense_linear(x, self.weight, self.bias)

    def fuses_one_token(self, dtype: torch.dtype) -> bool:
        """Whether `forward_fused` takes one token of x in `dtype`: weights of that dtype (bf16 /
        fp16), in the handoff form only (env.norm_handoff_on, on by default: the norms folded per
        program were slower than the separate kernels on dense weights, env.fused_decode_on)."""
        return norm_handoff_on() and dtype in (torch.bfloat16, torch.float16) and self.weight.dtype == dtype

    def forward_fused(self, x: Tensor, fusion: GemvFusion) -> Tensor:
        """One token's dense GEMV with a norm, SiLU, residual add or norm handoff folded in."""
        return dense_gemv(x, self.weight, self.bias, fusion=fusion)


class SiluAndMul(nn.Module):
    """x: [num_tokens, 2 * d] (gate then up, as fused by `gate_up_proj`) -> [num_tokens, d]."""

    def forward(self, x: Tensor) -> Tensor:
        if x.is_cuda and x.dim() == 2:
            return fused_silu_and_mul(x)
        return silu_and_mul_ref(x)


def rope_parameters(config: PretrainedConfig) -> dict[str, Any]:
    """The config's RoPE parameters as one flat dict with rope_type and rope_theta.

    transformers 5 keeps them in `config.rope_parameters`; 4.x in `rope_scaling` (may be None)
    plus `rope_theta`. Per-layer-type (nested) RoPE is not supported.
    """
    if hasattr(config, "standardize_rope_params"):  # transformers 5
        params = dict(getattr(config, "rope_parameters", None) or {})
        if any(isinstance(v, dict) for v in params.values()):
            raise UnsupportedModelError("Per-layer-type RoPE parameters are not supported by kvspill.")
    else:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def compute_inv_freq(config: PretrainedConfig, max_positions: int) -> tuple[Tensor, float]:
    """inv_freq [head_dim / 2] float32 on CPU and the attention scaling, from transformers."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = rope_parameters(config)
    rope_type = params["rope_type"]
    cpu = torch.device("cpu")
    # The init functions may standardize (mutate) the config they get: give them a copy.
    cfg = copy.deepcopy(config)
    if rope_type == "default" and "default" not in ROPE_INIT_FUNCTIONS:
        # transformers 5 moved the default into each model class (all our families share Llama's
        # LlamaRotaryEmbedding.compute_default_rope_parameters); its formula, written here because
        # importing modeling_llama pulls in generation utils and torch._dynamo (2-4 s of a CPU start).
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        base = params["rope_theta"]
        inv_freq, scaling = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0
    elif rope_type in ROPE_INIT_FUNCTIONS:
        fn = ROPE_INIT_FUNCTIONS[rope_type]
        if rope_type == "dynamic":
            # HF's formula divides by max_position_embeddings as the trained length; a
            # --rope-scaling override raised that, so restore the trained length here.
            original = params.get("original_max_position_embeddings")
            if original is not None:
                cfg.max_position_embeddings = original
            inv_freq, scaling = fn(cfg, cpu, seq_len=max_positions)
        elif rope_type == "longrope":
            original = params.get("original_max_position_embeddings", config.max_position_embeddings)
            inv_freq, scaling = fn(cfg, cpu, seq_len=max_positions if max_positions > original else None)
        else:
            inv_freq, scaling = fn(cfg, cpu)
    else:
        raise UnsupportedModelError(
            f"rope_type {rope_type!r} is not supported; transformers knows "
            f"{sorted(set(ROPE_INIT_FUNCTIONS) | {'default'})}."
        )
    return inv_freq.to(device=cpu, dtype=torch.float32), float(scaling)


def build_cos_sin_cache(config: PretrainedConfig, max_positions: int) -> Tensor:
    """-> cos_sin_cache: [max_positions, head_dim] float32 on CPU, attention scaling applied."""
    inv_freq, scaling = compute_inv_freq(config, max_positions)
    # Same ops as HF's rotary forward (position.float() * inv_freq, then cos/sin * scaling).
    positions = torch.arange(max_positions, dtype=torch.int64).float()
    freqs = positions[:, None] * inv_freq[None, :]  # [max_positions, head_dim / 2]
    return torch.cat([freqs.cos() * scaling, freqs.sin() * scaling], dim=-1)


def apply_rotary_ref(positions: Tensor, q: Tensor, k: Tensor, cos_sin_cache: Tensor) -> tuple[Tensor, Tensor]:
    """Neox-style RoPE. positions: [num_tokens]; q: [num_tokens, num_heads, head_dim];
    k: [num_tokens, num_kv_heads, head_dim]; cos_sin_cache: [max_positions, head_dim]."""
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)  # each [num_tokens, head_dim / 2]
    cos = cos.unsqueeze(1).to(q.dtype)  # [num_tokens, 1, head_dim / 2]
    sin = sin.unsqueeze(1).to(q.dtype)

    def rotate(x: Tensor) -> Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    return rotate(q), rotate(k)


class RotaryEmbedding(nn.Module):
    """Holds the cos/sin table for `max_positions` positions and applies it to q and k.

    Built on the meta device the table is only a placeholder: call `init_buffers()` once the
    module has real storage (after `to_empty`). Never cast this module with `.to(dtype)`:
    the table stays float32 whatever the model dtype.
    """

    def __init__(self, config: PretrainedConfig, head_dim: int, max_positions: int) -> None:
        super().__init__()
        self.config = config
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.cos_sin_cache: Tensor
        self.register_buffer(
            "cos_sin_cache", torch.empty(max_positions, head_dim, dtype=torch.float32), persistent=False
        )
        if self.cos_sin_cache.device.type != "meta":
            self.init_buffers()

    def init_buffers(self) -> None:
        cache = build_cos_sin_cache(self.config, self.max_positions)
        if cache.shape[-1] != self.head_dim:
            raise UnsupportedModelError(
                f"RoPE covers {cache.shape[-1]} of head_dim {self.head_dim}; partial rotary is not supported."
            )
        self.cos_sin_cache = cache.to(self.cos_sin_cache.device)

    def forward(self, positions: Tensor, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """q, k rotated: use the returned tensors; q and k themselves may be overwritten (the CUDA
        and CPU kernels rotate in place, the torch reference into new tensors)."""
        if q.is_cuda:  # rotates q and k in place, in one kernel
            return fused_apply_rope(q, k, positions, self.cos_sin_cache)
        rotated = cpu_ops.rope_in_place(positions, q, k, self.cos_sin_cache)  # in place too, one call
        return rotated if rotated is not None else apply_rotary_ref(positions, q, k, self.cos_sin_cache)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_positions={self.max_positions}"


def rope_table_bytes(model: nn.Module) -> int:
    """Bytes of the model's RoPE tables (ModelSpec.rope_table_bytes estimates the same)."""
    return sum(m.cos_sin_cache.nbytes for m in model.modules() if isinstance(m, RotaryEmbedding))
