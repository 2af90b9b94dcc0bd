"""The contract between model files and the model runner.

A model never owns or sees the KV cache. Each attention layer computes q, k, v for the
flattened tokens of a step (many sequences, no batch dimension, no padding), applies q/k norm
(where the family has it) and RoPE, and hands them to an injected `AttentionFn`. The runner's
implementation writes k/v into its paged cache (by `layer_idx`) and attends; the model only
gets the attention output back.

Invariants every model class keeps (checked by tests/model):
- `forward(input_ids, positions, attention) -> hidden`; `compute_logits(hidden) -> float32`
  (`widen=False`: the lm_head's dtype, for a caller that widens them in its own kernel).
- Parameter names are Hugging Face's, except the fused `qkv_proj` and `gate_up_proj`, which
  `load_weights` builds from HF's `q/k/v_proj` and `gate/up_proj` as tensors arrive.
- The softmax scale is `head_dim ** -0.5` for every supported family; the runner applies it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from kvspill.errors import ModelNotFoundError


@runtime_checkable
class AttentionFn(Protocol):
    """Causal attention over a step's tokens plus whatever each sequence has cached.

    Called once per layer per forward, in layer order. Shapes:
      q: [num_tokens, num_heads, head_dim]      (after q-norm and RoPE)
      k: [num_tokens, num_kv_heads, head_dim]   (after k-norm and RoPE)
      v: [num_tokens, num_kv_heads, head_dim]
      returns [num_tokens, num_heads, head_dim], in q's dtype.
    num_heads is a multiple of num_kv_heads (grouped-query attention).

    An implementation with a true `fuses_rope` attribute takes q and k BEFORE RoPE together with
    `rope=(positions [num_tokens] int64, cos_sin_cache [max_positions, head_dim] float32)` and
    applies it itself (fused with its KV store); the model then skips its own rotation.
    """

    def __call__(
        self, layer_idx: int, q: Tensor, k: Tensor, v: Tensor, rope: tuple[Tensor, Tensor] | None = None
    ) -> Tensor: ...


@runtime_checkable
class CausalLM(Protocol):
    """What the runner needs from a model class (e.g. `LlamaForCausalLM`, an `nn.Module`)."""

    def __call__(self, input_ids: Tensor, positions: Tensor, attention: AttentionFn) -> Tensor:
        """`forward` through `nn.Module.__call__`, which is how the runner calls it."""
        ...

    def forward(self, input_ids: Tensor, positions: Tensor, attention: AttentionFn) -> Tensor:
        """input_ids, positions: [num_tokens] int64 -> hidden: [num_tokens, hidden_size]."""
        ...

    def compute_logits(self, hidden: Tensor, widen: bool = True) -> Tensor:
        """hidden: [num_tokens, hidden_size] -> logits: [num_tokens, vocab_size] float32, or with
        widen=False in whatever dtype the lm_head gave them (the caller widens them)."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, Tensor]]) -> set[str]:
        """Copy HF-named tensors in one at a time; returns the names of parameters loaded."""
        ...

    def init_buffers(self) -> None:
        """(Re)compute non-persistent buffers (RoPE tables) on the model's device."""
        ...


def copy_param(param: Tensor, loaded: Tensor, name: str) -> None:
    """Copy `loaded` into `param` (casting dtype, moving device) after a shape check."""
    if tuple(param.shape) != tuple(loaded.shape):
        raise ModelNotFoundError(
            f"Weight {name!r} has shape {tuple(loaded.shape)} but the model expects {tuple(param.shape)}: "
            "the checkpoint does not match its config. Re-download the model or fix config.json."
        )
    with torch.no_grad():
        param.copy_(loaded)
