"""`quant_linear`: y = x @ W.T + bias for a GGUF-quantized W, choosing the kernel by batch size.

Shapes: x [..., in_features] bf16 / fp16 / fp32; weight QuantizedWeight [out_features, in_features];
bias [out_features] or None -> [..., out_features] in x's dtype.

Paths (`quant_linear_path` says which one a call takes):
- "mma": 2-64 tokens of a Q4_K, Q5_K, Q6_K or Q4_1 weight where `gguf_mma_configs.MMA_CONFIGS` (or a
  tuned KVSPILL_MMA_CONFIGS file) has a config for that count: the tensor-core kernel, which reads
  the quantized bytes once for all tokens;
- "gemv": <= MAX_GEMV_TOKENS tokens on a Triton device, otherwise: the fused dequantize-GEMV, which reads
  the quantized bytes once (decode is weight-bandwidth bound); 2-4 tokens of Q4_1 and 2 of Q5_K or
  Q8_0 (`gguf_gemv.LANE_PASSES_MAX_TOKENS`, KVSPILL_LANE_PASSES=N) come here before "mma" and run
  those types' one-token int16-x lanes a pass per two tokens;
- "dequant_matmul": more tokens: the layer is dequantized, then multiplied densely (prefill is
  compute bound; the dequantize costs one pass over the weight). A weight larger than
  DEQUANT_SLICE_BYTES dense goes in slices of rows, each dequantized into one reused buffer
  (`scratch`, or a new one) and multiplied into its columns of the output: a step's transient is
  one slice, not a whole dequantized lm_head (1,002 MiB for an 8B; issue 55 found steps of 32
  sequences failing on that allocation in a 16 GiB budget);
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

from kvspill.kernels.fused_ops import silu_and_mul, silu_and_mul_ref
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import QuantizedWeight, dequantize_ref
from kvspill.kernels.gguf_gemv import MAX_GEMV_TOKENS, lane_passes_launcher, quant_matmul_gemv
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config
from kvspill.kernels.triton_compat import HAS_TRITON

# The most of one weight dequantized at once (dense bytes). 64 MiB: an 8B's fused qkv (48 MiB)
# stays whole; its gate_up (224 MiB) goes in 4 slices, its lm_head (1,002 MiB) in 16, each a
# matmul of 4-8K output columns, large enough to keep the tensor cores busy.
DEQUANT_SLICE_BYTES = 64 * 2**20
_SLICE_ROW_MULTIPLE = 128  # slices start on tensor-core-friendly row boundaries

QuantLinearPath = Literal["mma", "gemv", "dequant_matmul", "reference"]


def quant_linear_path(x: torch.Tensor, weight: QuantizedWeight) -> QuantLinearPath:
    """The path `quant_linear(x, weight)` takes when no `path` is forced."""
    if x.device.type == "cpu" or not HAS_TRITON:
        return "reference"
    num_tokens = x.numel() // max(1, x.shape[-1])
    if num_tokens <= MAX_GEMV_TOKENS and lane_passes_launcher(x.reshape(num_tokens, -1), weight) is not None:
        return "gemv"  # the one-token lanes, a pass per two tokens
    if mma_config(weight, num_tokens) is not None:
        return "mma"
    return "gemv" if num_tokens <= MAX_GEMV_TOKENS else "dequant_matmul"


def dequant_slice_rows(out_features: int, in_features: int, dtype: torch.dtype) -> int:
    """Rows of a weight dequantized at once on the dequant_matmul path (all of them when the dense
    weight fits DEQUANT_SLICE_BYTES)."""
    rows = DEQUANT_SLICE_BYTES // max(1, in_features * dtype.itemsize)
    rows = max(_SLICE_ROW_MULTIPLE, rows // _SLICE_ROW_MULTIPLE * _SLICE_ROW_MULTIPLE)
    return min(out_features, rows)


def _slice_buffer(
    scratch: torch.Tensor | None, rows: int, weight: QuantizedWeight, dtype: torch.dtype
) -> torch.Tensor:
    """A [rows, in_features] buffer: the front of `scratch` (any shape, contiguous) or a new one."""
    if scratch is None:
        return torch.empty((rows, weight.in_features), dtype=dtype, device=weight.device)
    size = rows * weight.in_features
    assert scratch.dtype == dtype and scratch.is_contiguous() and scratch.numel() >= size, (
        f"scratch must be a contiguous {dtype} buffer of >= {size} elements, "
        f"got {scratch.dtype} {tuple(scratch.shape)}"
    )
    assert scratch.device == weight.device, f"scratch on {scratch.device}, weight on {weight.device}"
    return scratch.view(-1)[:size].view(rows, weight.in_features)


def _dequant_matmul(
    x2: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None, scratch: torch.Tensor | None
) -> torch.Tensor:
    """x2 [tokens, in] @ W.T, W dequantized one slice of rows at a time into one buffer."""
    rows = dequant_slice_rows(weight.out_features, weight.in_features, x2.dtype)
    buffer = _slice_buffer(scratch, rows, weight, x2.dtype)
    if rows == weight.out_features:
        return F.linear(x2, dequantize(weight, x2.dtype, out=buffer), bias)
    out = torch.empty((x2.shape[0], weight.out_features), dtype=x2.dtype, device=x2.device)
    for start in range(0, weight.out_features, rows):
        end = min(start + rows, weight.out_features)
        w = dequantize(weight.rows(start, end), x2.dtype, out=buffer[: end - start])
        torch.matmul(x2, w.t(), out=out[:, start:end])  # cuBLAS writes the strided columns in place
    return out if bias is None else out.add_(bias)


def quant_linear(
    x: torch.Tensor,  # [..., in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
    scratch: torch.Tensor | None = None,  # the dequant_matmul path's slice buffer (else a new one)
    path: QuantLinearPath | None = None,  # force a path (kernel tests on the CPU interpreter)
    out: torch.Tensor | None = None,  # [tokens, out_features] to write into (rows may be strided)
    gated: bool = False,  # x is [..., 2 * in_features], gate then up: silu(gate) * up @ W.T
) -> torch.Tensor:
    """x @ W.T (+ bias) -> [..., out_features] in x's dtype; see the module docstring for paths.
    With `out` (2-D x): written there, in place on the kernel paths, and returned; a fused
    projection of several types writes each part into its columns of one output. `gated` (an
    MLP's down projection): the "mma" path applies the SiLU in its x permutation (one launch
    less where its words form runs); the others run `silu_and_mul` first."""
    width = 2 * weight.in_features if gated else weight.in_features
    assert x.shape[-1] == width, f"x has {x.shape[-1]} features, weight {weight.in_features} (gated: {gated})"
    lead = x.shape[:-1]
    x2 = x.reshape(-1, width)
    path = path or quant_linear_path(x2[:, : weight.in_features], weight)
    if gated and path != "mma":
        x2, gated = silu_and_mul_ref(x2) if path == "reference" else silu_and_mul(x2), False
    if path == "mma":
        y = quant_matmul_mma(x2 if x2.stride(1) == 1 else x2.contiguous(), weight, bias, out=out, gated=gated)
    elif path == "gemv":
        y = quant_matmul_gemv(x2 if x2.stride(1) == 1 else x2.contiguous(), weight, bias, out=out)
    elif path == "dequant_matmul":
        y = _dequant_matmul(x2, weight, bias, scratch)
    else:
        dense = dequantize_ref(weight.gguf_rows(), weight.qtype, weight.in_features, x.dtype)
        y = F.linear(x2, dense, None if bias is None else bias.to(x.dtype))  # x may be widened (cpu_widens)
    if out is not None:
        return y if y is out else out.copy_(y)
    return y.reshape(*lead, weight.out_features)
