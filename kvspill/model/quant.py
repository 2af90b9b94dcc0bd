"""Layers whose weights stay in GGUF's quantized bytes: `QuantLinear` and `QuantEmbedding`.

A GGUF file's quantized tensors (Q4_0 ... Q6_K, `kernels/gguf_formats.py`) go to the device as
they are. `QuantLinear` stands in for `nn.Linear` (a fused qkv_proj or gate_up_proj included):
its weight is one `QuantizedWeight`, or, when the fused shards have different types (Q4_K_M
files keep some attn_v / ffn_down in Q6_K), one per run of adjacent shards of one type (q and k
together, v apart), each written into its columns of one output (one token of Q4_K / Q5_K then
Q6_K: both in one launch, kernels/gguf_gemv_mixed.py). `QuantEmbedding` gathers the
quantized rows of the ids and dequantizes only those; with tied embeddings it is also the lm_head
(`project`).

Invariants:
- The raw bytes are registered buffers (`qweight_0`, ...), so the model's memory and
  `state_dict` see them; nothing is dequantized ahead of a call except into the kernels' scratch.
- On the CPU the C++ kernel runs (kernels/cpu_gguf.py; the torch reference without g++): the
  file's weights in fp32, the result rounded once to the activation dtype (the dequantized-at-load
  model rounds the weights to it first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import groupby
from typing import cast

import torch
from torch import Tensor, nn

from kvspill.env import norm_handoff_on
from kvspill.kernels.fp8_gemv import GemvFusion
from kvspill.kernels.fused_ops import rms_norm, silu_and_mul
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import QuantizedWeight, dequantize_ref, split_q6k_rows, split_rows_aligned
from kvspill.kernels.gguf_gemv import MAX_GEMV_TOKENS, int16x_one_token_config, quant_gemv_fused
from kvspill.kernels.gguf_gemv_mixed import mixed_gemv, mixed_gemv_config
from kvspill.kernels.gguf_mma_words import pack_scales
from kvspill.kernels.quant_linear import dequant_slice_rows, quant_linear
from kvspill.model.fp8 import Fp8Linear
from kvspill.model.parallel import SINGLE, TensorParallel


class QuantLinear(nn.Module):
    """y = x @ W.T (+ bias) with W in GGUF blocks; `out_sizes` are the rows of each fused shard."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_sizes = list(out_sizes)
        self.out_features = sum(out_sizes)
        self.parts: list[QuantizedWeight] = []  # filled by `set_weight` after the model is on its device
        self.bias = nn.Parameter(torch.empty(self.out_features, dtype=dtype)) if bias else None

    def set_weight(self, shards: list[QuantizedWeight]) -> None:
        """The shards in row order; each run of adjacent shards of one type merged into one weight
        (a Q4_K_M layer's Q4_K q and k, beside its Q6_K v: one launch for q and k, not two)."""
        assert [s.out_features for s in shards] == self.out_sizes, "shards must match the fused row sizes"
        assert all(s.in_features == self.in_features for s in shards)
        self.parts = [_merged(list(run)) for _, run in groupby(shards, key=lambda s: s.qtype)]
        for i, part in enumerate(self.parts):
            self.register_buffer(f"qweight_{i}", part.data, persistent=False)

    @property
    def weight_nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def forward(self, x: Tensor) -> Tensor:
        # x: [num_tokens, in_features] -> [num_tokens, out_features]
        if len(self.parts) == 1:
            return quant_linear(x, self.parts[0], self.bias)
        # Each part into its columns of one output: no concatenation kernel (16 a step of a
        # Q4_K_M 8B, whose mixed layers' v is Q6_K).
        x2 = x.reshape(-1, self.in_features)
        out = torch.empty((x2.shape[0], self.out_features), dtype=x.dtype, device=x.device)
        if x2.is_cuda and (config := mixed_gemv_config(x2, self.parts)) is not None:  # one token, one launch
            return mixed_gemv(x2, self.parts, self.bias, out, config).reshape(
                *x.shape[:-1], self.out_features
            )
        widths = [part.out_features for part in self.parts]
        for part, columns in zip(self.parts, out.split(widths, dim=1), strict=True):
            quant_linear(x2, part, out=columns)
        if self.bias is not None:
            out += self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    project = forward  # as the lm_head

    def fuses_one_token(self, dtype: torch.dtype) -> bool:
        """Whether `forward_fused` takes one token of x in `dtype`: in the norm handoff's form only
        (env.norm_handoff_on, on by default; the norms folded per program lost 4-6% on these
        GEMVs, bench/results/2026-12-06-mixed-qkv), each part on its int16-x lanes, two parts in
        one mixed launch."""
        if not norm_handoff_on() or dtype not in (torch.bfloat16, torch.float16) or not self.parts:
            return False
        x = torch.zeros(1, self.in_features, dtype=dtype, device=self.parts[0].data.device)
        if len(self.parts) == 2:
            return mixed_gemv_config(x, self.parts) is not None
        return len(self.parts) == 1 and int16x_one_token_config(x, self.parts[0]) is not None

    def forward_fused(self, x: Tensor, fusion: GemvFusion) -> Tensor:
        """One token with a GemvFusion: a handed-off norm's sums, a residual add and a norm handoff
        fold into the int16-x GEMVs; a norm or SiLU before the GEMV runs as its own kernel first."""
        if fusion.norm_weight is not None:
            x = cast(Tensor, rms_norm(x, fusion.norm_weight, fusion.eps))
            fusion = fusion._replace(norm_weight=None)
        if fusion.gated:
            x, fusion = silu_and_mul(x), fusion._replace(gated=False)
        if len(self.parts) == 2:
            assert fusion.residual is None and fusion.handoff is None, (
                "a mixed launch takes handed-off sums only"
            )
            out = torch.empty((1, self.out_features), dtype=x.dtype, device=x.device)
            return mixed_gemv(x, self.parts, self.bias, out, fusion=fusion)
        return quant_gemv_fused(x, self.parts[0], self.bias, fusion)

    def forward_gated(self, x: Tensor) -> Tensor:
        """silu(gate) * up @ W.T (+ bias) for x [num_tokens, 2 * in_features], gate then up (an
        MLP's down projection, one GGUF tensor): `quant_linear` (gated) applies the SiLU, in the
        words form's x permutation where that form runs."""
        assert len(self.parts) == 1, "a gated projection is one weight (an MLP's down), not a fused one"
        return quant_linear(x, self.parts[0], self.bias, gated=True)

    def extra_repr(self) -> str:
        types = ",".join(p.qtype for p in self.parts) or "empty"
        return f"in_features={self.in_features}, out_features={self.out_features}, qtype={types}"


def _merged(shards: list[QuantizedWeight]) -> QuantizedWeight:
    """Shards of one type (same in_features) as one weight: their rows in order."""
    if len(shards) == 1:
        return shards[0]
    rows = sum(s.out_features for s in shards)
    data = torch.cat([s.data for s in shards])
    return QuantizedWeight(data, shards[0].qtype, rows, shards[0].in_features)


class QuantEmbedding(nn.Module):
    """Token embedding with quantized rows: [vocab_size, hidden_size] in GGUF blocks.

    Split over tensor-parallel ranks (`tp`), a rank holds rows [start, start + shard_rows) and
    the lookup sums the ranks' parts, as `VocabParallelEmbedding` does (model/parallel.py)."""

    def __init__(
        self, num_embeddings: int, embedding_dim: int, dtype: torch.dtype, tp: TensorParallel = SINGLE
    ) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.dtype = dtype  # of the activations it returns
        self.tp = tp
        self.shard_rows = tp.vocab_shard(num_embeddings) if tp.size > 1 else num_embeddings
        self.start = tp.rank * self.shard_rows
        self.qweight: QuantizedWeight | None = None

    def set_weight(self, weight: QuantizedWeight) -> None:
        assert (weight.out_features, weight.in_features) == (self.shard_rows, self.embedding_dim)
        self.qweight = weight
        self.register_buffer("qweight_0", weight.data, persistent=False)

    @property
    def weight_nbytes(self) -> int:
        return 0 if self.qweight is None else self.qweight.nbytes

    def forward(self, input_ids: Tensor) -> Tensor:
        # input_ids: [num_tokens] -> [num_tokens, embedding_dim]
        assert self.qweight is not None, "QuantEmbedding used before set_weight"
        w = self.qweight
        if self.tp.size == 1:
            return self._rows(w, input_ids)
        local = input_ids - self.start
        outside = (local < 0) | (local >= self.shard_rows)
        x = self._rows(w, local.masked_fill(outside, 0))
        return self.tp.all_reduce(x.masked_fill(outside.unsqueeze(-1), 0))

    def _rows(self, w: QuantizedWeight, ids: Tensor) -> Tensor:
        rows = w.data.index_select(0, ids)  # [num_tokens, bytes_per_row]
        gathered = replace(w, data=rows, out_features=rows.shape[0], scale_pairs=None)
        if rows.device.type == "cpu":
            return dequantize_ref(gathered.gguf_rows(), w.qtype, w.in_features, self.dtype)
        return dequantize(gathered, self.dtype)

    def project(self, hidden: Tensor) -> Tensor:
        """The tied lm_head: hidden [num_tokens, embedding_dim] -> [num_tokens, shard_rows] (all of
        num_embeddings with one rank; the model gathers the ranks' logits)."""
        assert self.qweight is not None, "QuantEmbedding used before set_weight"
        return quant_linear(hidden, self.qweight)


def quantized_weights(model: nn.Module) -> list[QuantizedWeight]:
    """Every GGUF-block weight `model` holds: the QuantLinear parts and the QuantEmbedding tables."""
    weights = [p for m in model.modules() if isinstance(m, QuantLinear) for p in m.parts]
    return weights + [
        m.qweight for m in model.modules() if isinstance(m, QuantEmbedding) and m.qweight is not None
    ]


def attach_scale_pairs(model: nn.Module, dtype: torch.dtype) -> int:
    """Give every Q4_K weight of `model` that multiplies (`_replace_matmul_weights`) its scale pairs
    in `dtype` (the activations'; kernels/gguf_mma_words.pack_scales), registered as buffers beside
    the blocks so the model's memory counts them; the tensor-core kernel of batched steps reads them
    in place of the blocks' scale bytes (bench/results/2026-12-04-h200-mma-dequant-cost). Returns
    the bytes added: 32 a 144-byte super-block (plan/weights.q4k_matmul_bytes counts the same
    weights)."""
    before = held_scale_pair_bytes(model)
    paired = _replace_matmul_weights(model, lambda w: _paired(w, dtype) if _wants_pairs(w, dtype) else None)
    for module, i, weight in paired:
        module.register_buffer(f"scale_pairs_{i}", weight.scale_pairs, persistent=False)
    return held_scale_pair_bytes(model) - before


def split_q6k_weights(model: nn.Module) -> int:
    """Put the Q6_K weights of `model` that multiply (`_replace_matmul_weights`) in the split layout
    (kernels/gguf_formats.split_q6k_rows), in place, a few thousand rows at a time; the GPU kernels
    read it with wider loads. The same bytes. Rows of an odd count of super-blocks (2 mod 4 bytes
    apart) stay as they are. Returns how many weights moved."""
    return len(_replace_matmul_weights(model, lambda w: _split_in_place(w) if _wants_split(w) else None))


def _replace_matmul_weights(
    model: nn.Module, change: Callable[[QuantizedWeight], QuantizedWeight | None]
) -> list[tuple[nn.Module, int, QuantizedWeight]]:
    """Replace each weight of `model` that multiplies (the QuantLinear parts, a tied embedding's
    table; not an untied embedding, which only gathers rows) by `change(weight)` where that is not
    None. Returns (module, part index, new weight) of each one replaced (an embedding's index: 0)."""
    changed: list[tuple[nn.Module, int, QuantizedWeight]] = []
    tied = bool(getattr(model, "tie_word_embeddings", False))
    for module in model.modules():
        if isinstance(module, QuantLinear):
            for i, part in enumerate(module.parts):
                new = change(part)
                if new is not None:
                    module.parts[i] = new
                    changed.append((module, i, new))
        elif tied and isinstance(module, QuantEmbedding) and module.qweight is not None:
            new = change(module.qweight)
            if new is not None:
                module.qweight = new
                changed.append((module, 0, new))
    return changed


def _wants_split(weight: QuantizedWeight) -> bool:
    return weight.qtype == "Q6_K" and not weight.split and split_rows_aligned(weight.data)


def _split_in_place(weight: QuantizedWeight) -> QuantizedWeight:
    for start in range(0, weight.out_features, _SPLIT_ROWS):
        rows = weight.data[start : start + _SPLIT_ROWS]
        rows.copy_(split_q6k_rows(rows))
    return replace(weight, split=True)


_SPLIT_ROWS = 4096  # rows moved at once (one transient copy of them)


def held_scale_pair_bytes(model: nn.Module) -> int:
    """Bytes of the scale pairs `model`'s quantized weights hold (`attach_scale_pairs`)."""
    pairs = (w.scale_pairs for w in quantized_weights(model) if w.scale_pairs is not None)
    return sum(p.numel() * p.element_size() for p in pairs)


def _wants_pairs(weight: QuantizedWeight, dtype: torch.dtype) -> bool:
    return weight.qtype == "Q4_K" and weight.scale_pairs is None and dtype in (torch.bfloat16, torch.float16)


def _paired(weight: QuantizedWeight, dtype: torch.dtype) -> QuantizedWeight:
    pairs = pack_scales(weight, dtype)
    return replace(weight, scale_pairs=pairs)


def dequant_scratch_bytes(model: nn.Module, dtype: torch.dtype, num_tokens: int) -> int:
    """The largest dense slice of a weight a GGUF projection dequantizes for a step of
    `num_tokens` rows (past MAX_GEMV_TOKENS the kernels dequantize, then matmul; a weight over
    `kernels/quant_linear.DEQUANT_SLICE_BYTES` goes in slices), in `dtype`; 0 when such a step
    takes the gemv path or nothing is quantized. A decode CUDA graph of that batch keeps it in
    its memory pool."""
    if num_tokens <= MAX_GEMV_TOKENS:
        return 0
    parts = quantized_weights(model)
    slices = (dequant_slice_rows(p.out_features, p.in_features, dtype) * p.in_features for p in parts)
    return max(slices, default=0) * dtype.itemsize


def model_weight_bytes(model: nn.Module) -> int:
    """Bytes of a model's weights as held: dense parameters plus quantized blocks (RoPE tables
    and other buffers excluded)."""
    dense = sum(p.numel() * p.element_size() for p in model.parameters())
    kinds = (QuantLinear, QuantEmbedding, Fp8Linear)
    quantized = sum(m.weight_nbytes for m in model.modules() if isinstance(m, kinds))
    return dense + quantized
