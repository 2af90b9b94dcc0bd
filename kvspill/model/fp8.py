"""fp8 weights for the decoder layers (`--quantization fp8`, vLLM's meaning): `Fp8Linear`.

A bf16 / fp16 / fp32 checkpoint is quantized at load, one HF tensor at a time, to float8_e4m3fn
with one float32 scale per output row (kernels/fp8_linear.py). As in vLLM, the q/k/v/o and
gate/up/down projections of every decoder layer become `Fp8Linear`; the embedding, the norms
and the lm_head stay dense.

How a model gets fp8 weights (the loader's steps, with two more):
1. build on `meta`, then `install_fp8_modules(model, dtype)`: the dense weights are never allocated;
2. `to_empty(device)`, `init_buffers()`;
3. `load_weights_fp8(model, weights)`: HF's q/k/v/o/gate/up/down `.weight` go to `load_shard`
   (with tensor parallelism: this rank's rows, or for o/down whole rows quantized then this rank's
   columns, so the split holds exactly one rank's fp8 values and scales), everything else (embeddings, norms, lm_head, biases) to `model.load_weights`;
   `expected_weight_names_fp8(model)` is the set a complete checkpoint provides.
For random-weight benchmarks, step 3 is `fill_fp8_randomly(model, generator)`.

Invariants:
- Per-row scales make shards independent: `load_shard(i, w)` quantizes w alone into shard i's
  rows of `weight_fp8` / `weight_scale`, on the module's device (one float32 copy of one shard
  is the largest temporary). A module computes only once every shard is loaded (`is_loaded`).
- `weight_fp8` and `weight_scale` are buffers (the model's memory and `state_dict` see them);
  the optional bias is a Parameter, so `model.load_weights` fills it under its HF name.
- Offload (`--cpu-offload-gb`) moves parameters only: an fp8 model must not be offloaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor, nn

from kvspill.errors import ModelNotFoundError
from kvspill.kernels.fp8_gemv import GemvFusion, fp8_gemv
from kvspill.kernels.fp8_linear import FP8_DTYPE, dequantize_fp8, fp8_linear, quantize_weight_fp8
from kvspill.model.llama import PROJECTION_SHARDS, LlamaForCausalLM, replace_projections
from kvspill.model.parallel import is_row_parallel, shard_weight


class Fp8Linear(nn.Module):
    """y = x @ (W_fp8 * scale).T (+ bias); `out_sizes` are the rows of each fused shard."""

    weight_fp8: Tensor  # [out_features, in_features] float8_e4m3fn
    weight_scale: Tensor  # [out_features] float32

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_sizes = list(out_sizes)
        self.out_features = sum(out_sizes)
        # Allocated wherever the caller's device context says (`meta` before `to_empty`).
        self.register_buffer("weight_fp8", torch.empty(self.out_features, in_features, dtype=FP8_DTYPE))
        self.register_buffer("weight_scale", torch.empty(self.out_features, dtype=torch.float32))
        self.bias = nn.Parameter(torch.empty(self.out_features, dtype=dtype)) if bias else None
        self.loaded_shards: set[int] = set()

    @property
    def is_loaded(self) -> bool:
        return len(self.loaded_shards) == len(self.out_sizes)

    @property
    def weight_nbytes(self) -> int:
        """Bytes held for the weight: fp8 values plus scales (the bias is a counted Parameter)."""
        return self.weight_fp8.numel() * self.weight_fp8.element_size() + self.weight_scale.numel() * 4

    def load_shard(self, index: int, weight: Tensor, name: str = "") -> None:
        """Quantize one HF tensor [out_sizes[index], in_features] (any float dtype, any device)
        into shard `index`'s rows."""
        expected = (self.out_sizes[index], self.in_features)
        if tuple(weight.shape) != expected:
            raise ModelNotFoundError(
                f"Weight {name or f'shard {index}'!r} has shape {tuple(weight.shape)} but the model expects "
                f"{expected}: the checkpoint does not match its config. Re-download the model or fix config.json."
            )
        with torch.no_grad():
            q, scale = quantize_weight_fp8(weight.to(self.weight_fp8.device))
        self.set_shard(index, q, scale)

    def set_shard(self, index: int, q: Tensor, scale: Tensor) -> None:
        """Shard `index`'s rows from values already quantized: q [rows, in_features] float8, scale [rows]."""
        start = sum(self.out_sizes[:index])
        with torch.no_grad():
            self.weight_fp8[start : start + q.shape[0]].copy_(q)
            self.weight_scale[start : start + q.shape[0]].copy_(scale)
        self.loaded_shards.add(index)

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        """The weight as the CPU path uses it: [out_features, in_features] in `dtype` (for tests)."""
        return dequantize_fp8(self.weight_fp8, self.weight_scale, dtype)

    def forward(self, x: Tensor) -> Tensor:
        # x: [num_tokens, in_features] -> [num_tokens, out_features]; fp8_linear picks the path
        # (torch._scaled_mm on CUDA, the dequantizing reference on the CPU).
        return fp8_linear(x, self.weight_fp8, self.weight_scale, self.bias)

    project = forward  # as an lm_head (unused: vLLM keeps the lm_head dense, so do we)

    def fuses_one_token(self, dtype: torch.dtype) -> bool:
        """Whether `forward_fused` takes one token of x in `dtype` (the fp8 GEMV's x types)."""
        return dtype in (torch.bfloat16, torch.float16)

    def forward_fused(self, x: Tensor, fusion: GemvFusion) -> Tensor:
        """One token's fp8 GEMV with a norm, SiLU or residual add folded in (`GemvFusion`)."""
        return fp8_gemv(x, self.weight_fp8, self.weight_scale, self.bias, fusion=fusion)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype=float8_e4m3fn"


def install_fp8_modules(model: LlamaForCausalLM, dtype: torch.dtype) -> int:
    """Replace every decoder layer's dense q/k/v/o and gate/up/down with `Fp8Linear` (on `meta`,
    before `to_empty`). Returns how many modules were replaced."""
    return replace_projections(
        model,
        lambda _i, _name, dense, out_sizes: Fp8Linear(
            dense.in_features, out_sizes, dense.bias is not None, dtype
        ),
    )


def _routes(model: LlamaForCausalLM) -> dict[str, tuple[Fp8Linear, int]]:
    """HF weight name -> (the Fp8Linear that takes it, shard index), for every Fp8Linear."""
    routes: dict[str, tuple[Fp8Linear, int]] = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, Fp8Linear):
            continue
        for fused, shards in PROJECTION_SHARDS.items():
            if module_name.endswith("." + fused):
                base = module_name[: -len(fused)]
                for index, shard in enumerate(shards):
                    routes[f"{base}{shard}.weight"] = (module, index)
    return routes


def load_weights_fp8(model: LlamaForCausalLM, weights: Iterable[tuple[str, Tensor]]) -> set[str]:
    """Stream HF-named tensors in: Fp8Linear weights are quantized into place, the rest goes to
    `model.load_weights` (same errors for unknown names). Returns the HF names loaded."""
    routes = _routes(model)
    tp = model.tp
    quantized: set[str] = set()

    def dense() -> Iterator[tuple[str, Tensor]]:
        for name, tensor in weights:
            route = routes.get(name)
            if route is None:
                yield name, tensor
                continue
            module, index = route
            if tp.size > 1 and is_row_parallel(name):
                # Quantize whole rows, then take this rank's columns: each row's scale is the one a
                # single rank computes, so the ranks together hold exactly its fp8 weights.
                q, scale = quantize_weight_fp8(tensor.to(module.weight_fp8.device))
                module.set_shard(index, shard_weight(name, q, tp), scale)
            else:  # column-parallel: rows (and their own scales) split as they are
                module.load_shard(index, shard_weight(name, tensor, tp), name)
            quantized.add(name)

    loaded = model.load_weights(dense())
    return loaded | quantized


def expected_weight_names_fp8(model: LlamaForCausalLM) -> set[str]:
    """HF names a complete checkpoint provides for a model with Fp8Linear modules installed
    (`model.expected_weight_names()` sees parameters only, so it misses the fp8 weights)."""
    return model.expected_weight_names() | set(_routes(model))


def fill_fp8_randomly(model: LlamaForCausalLM, generator: torch.Generator, std: float = 0.02) -> None:
    """Random weights for `random:SHAPE:fp8` benchmarks: each shard drawn N(0, std) in float32 on the
    generator's device, then quantized like a checkpoint's (so the scales are realistic)."""
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            for index, rows in enumerate(module.out_sizes):
                w = torch.empty(rows, module.in_features, device=generator.device)
                module.load_shard(index, w.normal_(0.0, std, generator=generator))
