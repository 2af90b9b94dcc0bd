"""`quant_linear`: y = x @ W.T + bias for a GGUF-quantized W, choosing the kernel by batch size.

Shapes: x [..., in_features] bf16 / fp16 / fp32; weight QuantizedWeight [out_features, in_features];
bias [out_features] or None -> [..., out_features] in x's dtype.

Paths (`quant_linear_path` says which one a call takes):
- "gemv": <= MAX_GEMV_TOKENS tokens on a Triton device: the fused dequantize-GEMV, which reads
  the quantized bytes once (decode is weight-bandwidth bound);
- "dequant_matmul": more tokens: the layer is dequantized into `scratch` (or a new buffer), then
  one dense matmul (prefill is compute bound; the dequantize costs one pass over the weight);
- "reference": on the CPU (or without Triton): torch's dequantize_ref then a dense matmul, so the
  CPU engine needs no Triton and never runs the interpreter. The kernel tests force the Triton
  paths on the CPU (`path=`) under TRITON_INTERPRET=1.

Invariant: all paths compute the same product up to fp32 reduction order and the rounding of x's
dtype (the dense paths round the dequantized weight to x's dtype; the GEMV keeps it in fp32).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import QuantizedWeight, dequantize_ref
from kvspill.kernels.gguf_gemv import MAX_GEMV_TOKENS, quant_matmul_gemv
from kvspill.kernels.triton_compat import HAS_TRITON

QuantLinearPath = Literal["gemv", "dequant_matmul", "reference"]


def quant_linear_path(x: torch.Tensor, weight: QuantizedWeight) -> QuantLinearPath:
    """The path `quant_linear(x, weight)` takes when no `path` is forced."""
    if x.device.type == "cpu" or not HAS_TRITON:
        return "reference"
    num_tokens = x.numel() // max(1, x.shape[-1])
    return "gemv" if num_tokens <= MAX_GEMV_TOKENS else "dequant_matmul"


def _scratch_view(
    scratch: torch.Tensor | None, weight: QuantizedWeight, dtype: torch.dtype
) -> torch.Tensor | None:
    """The [out_features, in_features] front of a reused buffer (any shape, contiguous)."""
    if scratch is None:
        return None
    size = weight.out_features * weight.in_features
    assert scratch.dtype == dtype and scratch.is_contiguous() and scratch.numel() >= size, (
        f"scratch must be a contiguous {dtype} buffer of >= {size} elements, "
        f"got {scratch.dtype} {tuple(scratch.shape)}"
    )
    assert scratch.device == weight.device, f"scratch on {scratch.device}, weight on {weight.device}"
    return scratch.view(-1)[:size].view(weight.out_features, weight.in_features)


def quant_linear(
    x: torch.Tensor,  # [..., in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
    scratch: torch.Tensor | None = None,  # reused dense buffer for the dequant_matmul path
    path: QuantLinearPath | None = None,  # force a path (kernel tests on the CPU interpreter)
) -> torch.Tensor:
    """x @ W.T (+ bias) -> [..., out_features] in x's dtype; see the module docstring for paths."""
    assert x.shape[-1] == weight.in_features, f"x has {x.shape[-1]} features, weight {weight.in_features}"
    lead = x.shape[:-1]
    x2 = x.reshape(-1, weight.in_features)
    path = path or quant_linear_path(x2, weight)
    if path == "gemv":
        out = quant_matmul_gemv(x2 if x2.stride(1) == 1 else x2.contiguous(), weight, bias)
    elif path == "dequant_matmul":
        w = dequantize(weight, x.dtype, out=_scratch_view(scratch, weight, x.dtype))
        out = F.linear(x2, w, bias)
    else:
        out = F.linear(x2, dequantize_ref(weight.data, weight.qtype, weight.in_features, x.dtype), bias)
    return out.reshape(*lead, weight.out_features)
