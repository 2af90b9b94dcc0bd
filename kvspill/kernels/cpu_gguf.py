"""GGUF-quantized linear layers on the CPU, read in their own blocks (the CPU's `quant_linear` paths).

Shapes:
    x:      [tokens, in_features] float (read as fp32; rows may be strided)
    weight: QuantizedWeight [out_features, in_features] on the host (split Q6_K rows, the GPU
            kernels' layout, are read through a copy in gguf's)
    out:    [tokens, out_features] float32 (rows may be strided, e.g. a fused projection's columns)

`cpu_gguf_matmul` runs the C++/OpenMP kernel (`cpu_gguf.cpp`, its AVX-512 path in
`cpu_gguf_avx512.h`; built on first use, kernels/cpu_build.py): each weight block is read once
for up to 8 tokens and dequantized in registers to the fp32 values `dequantize_ref` gives, then
multiplied with x in fp32; the result equals x @ dequantize_ref(W).T up to fp32 reduction order.
Decode reads the quantized bytes (0.56 - 1.06 bytes a weight) instead of a dense copy's 2 or 4, so
the weights' memory shrinks by the same factor. `cpu_gguf_dequantize` writes fp32 rows equal to
`dequantize_ref` bit for bit (the file is built with -ffp-contract=off), for the dense matmul of
a prefill chunk. `load_kernel()` returns None (one warning) where it cannot be built; callers
then run the torch reference (kernels/quant_linear.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import replace
from pathlib import Path

import torch

from kvspill.kernels.cpu_build import BASE_FLAGS, c_pointer, load_library
from kvspill.kernels.gguf_formats import QuantizedWeight

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("cpu_gguf.cpp")
_HEADERS = (
    Path(__file__).with_name("cpu_gguf_avx512.h"),
    Path(__file__).with_name("cpu_half.h"),
)  # in _SOURCE
# No fused multiply-adds outside the explicit ones: the dequantized weights round like the reference's.
_FLAGS = (*BASE_FLAGS, "-ffp-contract=off")


@functools.cache
def load_kernel() -> ctypes.CDLL | None:
    """The compiled kernel, or None (logged once) when it cannot be built here."""
    return load_library(
        "CPU GGUF",
        _SOURCE,
        _HEADERS,
        _FLAGS,
        ("kvspill_cpu_gguf_matmul", "kvspill_cpu_gguf_dequantize"),
        "GGUF weights on the CPU are dequantized by torch at every call, several times slower",
        logger,
    )


def _gguf_layout(weight: QuantizedWeight) -> QuantizedWeight:
    """`weight` in gguf's row layout (a copy of split Q6_K rows, the GPU kernels' layout)."""
    assert weight.device.type == "cpu", f"the CPU GGUF kernel reads host weights, got {weight.device}"
    return replace(weight, data=weight.gguf_rows(), split=False) if weight.split else weight


def cpu_gguf_matmul(
    x: torch.Tensor, weight: QuantizedWeight, out: torch.Tensor | None = None, portable: bool = False
) -> torch.Tensor:
    """x @ W.T in fp32 -> `out` ([tokens, out_features] float32, rows may be strided) or a new tensor.
    `portable`: skip the AVX-512 path (tests cover the other hosts' code with it)."""
    lib = load_kernel()
    assert lib is not None, "no CPU GGUF kernel: callers check load_kernel() first"
    weight = _gguf_layout(weight)
    tokens = x.shape[0]
    assert x.dim() == 2 and x.shape[1] == weight.in_features, (
        f"x must be [tokens, {weight.in_features}], got {tuple(x.shape)}"
    )
    x32 = x if x.dtype == torch.float32 and x.stride(1) == 1 else x.float().contiguous()
    if out is None:
        out = torch.empty((tokens, weight.out_features), dtype=torch.float32)
    assert out.dtype == torch.float32 and out.shape == (tokens, weight.out_features) and out.stride(1) == 1, (
        f"out must be float32 [{tokens}, {weight.out_features}] with contiguous rows"
    )
    i64 = ctypes.c_int64
    status = lib.kvspill_cpu_gguf_matmul(
        ctypes.c_int(weight.format.ggml_type), c_pointer(weight.data), i64(weight.out_features),
        i64(weight.data.stride(0)), i64(weight.in_features), c_pointer(x32), i64(x32.stride(0)), i64(tokens),
        c_pointer(out), i64(out.stride(0)), ctypes.c_int(torch.get_num_threads()), ctypes.c_int(int(portable)),
    )  # fmt: skip
    assert status == 0, f"CPU GGUF kernel refused a {weight.qtype} weight (status {status})"
    return out


def cpu_gguf_dequantize(weight: QuantizedWeight, out: torch.Tensor | None = None) -> torch.Tensor:
    """W as float32 [out_features, in_features] (into `out`: rows may be strided), equal to
    dequantize_ref bit for bit."""
    lib = load_kernel()
    assert lib is not None, "no CPU GGUF kernel: callers check load_kernel() first"
    weight = _gguf_layout(weight)
    if out is None:
        out = torch.empty((weight.out_features, weight.in_features), dtype=torch.float32)
    assert (
        out.dtype == torch.float32
        and out.shape == (weight.out_features, weight.in_features)
        and out.stride(1) == 1
    ), f"out must be float32 [{weight.out_features}, {weight.in_features}] with contiguous rows"
    i64 = ctypes.c_int64
    status = lib.kvspill_cpu_gguf_dequantize(
        ctypes.c_int(weight.format.ggml_type), c_pointer(weight.data), i64(weight.out_features),
        i64(weight.data.stride(0)), i64(weight.in_features), c_pointer(out), i64(out.stride(0)),
        ctypes.c_int(torch.get_num_threads()),
    )  # fmt: skip
    assert status == 0, f"CPU GGUF kernel refused a {weight.qtype} weight (status {status})"
    return out
