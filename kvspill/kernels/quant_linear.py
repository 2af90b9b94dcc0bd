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
- "cpu_gemv": <= CPU_GEMV_MAX_TOKENS tokens on the CPU: the C++ kernel (kernels/cpu_gguf.py), which
  reads the quantized bytes once for all tokens and dequantizes in registers;
- "cpu_dequant_matmul": more tokens on the CPU: the C++ dequantizer writes fp32 slices of rows,
  then an fp32 matmul (x widened; the result rounded once to x's dtype);
- "reference": without the C++ kernel on the CPU (no compiler), or without Triton elsewhere:
  torch's dequantize_ref then a dense matmul, so the CPU engine never runs the Triton
  interpreter. The kernel tests force the Triton paths on the CPU (`path=`) under TRITON_INTERPRET=1.

Invariant: all paths compute the same product up to fp32 reduction order and the rounding of x's
dtype (the GPU's dense path rounds the dequantized weight to x's dtype; the GEMVs and the CPU
paths keep it in fp32).
"""

from __future__ import annotations

import threading
from typing import Literal

import torch
import torch.nn.functional as F

from kvspill.kernels.cpu_gguf import cpu_gguf_dequantize, cpu_gguf_matmul
from kvspill.kernels.cpu_gguf import load_kernel as load_cpu_kernel
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
# On the CPU a slice is small and goes into a buffer each thread keeps: the matmul reads it from
# cache, and no call pays the page faults of a fresh buffer (a new 64 MiB one took 16 ms, more than
# dequantizing into it; bench/results/2026-12-07-cpu-gguf-gemv/).
CPU_DEQUANT_SLICE_BYTES = 4 * 2**20
_cpu_buffers = threading.local()

# Tokens up to which the CPU kernel reads the quantized blocks directly; past it, dequantize + an
# fp32 matmul is faster (bench/results/2026-12-07-cpu-gguf-gemv/).
CPU_GEMV_MAX_TOKENS = 32

QuantLinearPath = Literal["mma", "gemv", "dequant_matmul", "cpu_gemv", "cpu_dequant_matmul", "reference"]
_HOST_PATHS = ("cpu_gemv", "cpu_dequant_matmul", "reference")  # no Triton: torch runs the SiLU


def quant_linear_path(x: torch.Tensor, weight: QuantizedWeight) -> QuantLinearPath:
    """The path `quant_linear(x, weight)` takes when no `path` is forced."""
    num_tokens = x.numel() // max(1, x.shape[-1])
    if x.device.type == "cpu":
        if load_cpu_kernel() is None:
            return "reference"
        return "cpu_gemv" if num_tokens <= CPU_GEMV_MAX_TOKENS else "cpu_dequant_matmul"
    if not HAS_TRITON:
        return "reference"
    if num_tokens <= MAX_GEMV_TOKENS and lane_passes_launcher(x.reshape(num_tokens, -1), weight) is not None:
        return "gemv"  # the one-token lanes, a pass per two tokens
    if mma_config(weight, num_tokens) is not None:
        return "mma"
    return "gemv" if num_tokens <= MAX_GEMV_TOKENS else "dequant_matmul"


def dequant_slice_rows(
    out_features: int, in_features: int, dtype: torch.dtype, limit: int | None = None
) -> int:
    """Rows of a weight dequantized at once on the dequant_matmul path (all of them when the dense
    weight fits `limit` bytes, DEQUANT_SLICE_BYTES by default)."""
    limit = DEQUANT_SLICE_BYTES if limit is None else limit
    rows = limit // max(1, in_features * dtype.itemsize)
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


def _cpu_slice_buffer(rows: int, in_features: int) -> torch.Tensor:
    """This thread's float32 [rows, in_features] slice buffer (grown, never shrunk)."""
    size = rows * in_features
    buffer = getattr(_cpu_buffers, "buffer", None)
    if buffer is None or buffer.numel() < size:
        buffer = _cpu_buffers.buffer = torch.empty(size, dtype=torch.float32)
    return buffer[:size].view(rows, in_features)


def _dequant_matmul(
    x2: torch.Tensor,
    weight: QuantizedWeight,
    bias: torch.Tensor | None,
    scratch: torch.Tensor | None,
    on_cpu: bool = False,
) -> torch.Tensor:
    """x2 [tokens, in] @ W.T, W dequantized one slice of rows at a time into one buffer (Triton's
    dequantizer in x's dtype; `on_cpu`: the C++ one in fp32 into this thread's buffer, x widened)."""
    dtype = torch.float32 if on_cpu else x2.dtype
    xd = x2.to(dtype)
    if on_cpu:
        rows = dequant_slice_rows(weight.out_features, weight.in_features, dtype, CPU_DEQUANT_SLICE_BYTES)
        buffer = _cpu_slice_buffer(rows, weight.in_features)
    else:
        rows = dequant_slice_rows(weight.out_features, weight.in_features, dtype)
        buffer = _slice_buffer(scratch, rows, weight, dtype)

    def dense(part: QuantizedWeight, into: torch.Tensor) -> torch.Tensor:
        return cpu_gguf_dequantize(part, out=into) if on_cpu else dequantize(part, dtype, out=into)

    if rows == weight.out_features:
        y = F.linear(xd, dense(weight, buffer), None if bias is None else bias.to(dtype))
        return y.to(x2.dtype)
    out = torch.empty((x2.shape[0], weight.out_features), dtype=dtype, device=x2.device)
    for start in range(0, weight.out_features, rows):
        end = min(start + rows, weight.out_features)
        w = dense(weight.rows(start, end), buffer[: end - start])
        torch.matmul(xd, w.t(), out=out[:, start:end])  # cuBLAS writes the strided columns in place
    return (out if bias is None else out.add_(bias)).to(x2.dtype)


def _cpu_gemv(x2: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """x2 [tokens, in] @ W.T (+ bias) by the CPU kernel, in fp32, rounded once to x's dtype."""
    y = cpu_gguf_matmul(x2, weight)
    return (y if bias is None else y.add_(bias)).to(x2.dtype)


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
        x2, gated = silu_and_mul_ref(x2) if path in _HOST_PATHS else silu_and_mul(x2), False
    if path == "mma":
        y = quant_matmul_mma(x2 if x2.stride(1) == 1 else x2.contiguous(), weight, bias, out=out, gated=gated)
    elif path == "gemv":
        y = quant_matmul_gemv(x2 if x2.stride(1) == 1 else x2.contiguous(), weight, bias, out=out)
    elif path in ("dequant_matmul", "cpu_dequant_matmul"):
        y = _dequant_matmul(x2, weight, bias, scratch, on_cpu=path == "cpu_dequant_matmul")
    elif path == "cpu_gemv":
        y = _cpu_gemv(x2, weight, bias)
    else:
        dense = dequantize_ref(weight.gguf_rows(), weight.qtype, weight.in_features, x.dtype)
        y = F.linear(x2, dense, None if bias is None else bias.to(x.dtype))  # x may be widened (cpu_widens)
    if out is not None:
        return y if y is out else out.copy_(y)
    return y.reshape(*lead, weight.out_features)
