"""The CPU engine's small per-layer ops in one C++ call each: RMSNorm with its residual add, RoPE
in place, the K/V store into a host pool (`cpu_decode_ops.cpp`, built on first use by
kernels/cpu_build.py).

Shapes:
    add_rms_norm: x, residual [rows, d] (rows may be strided, elements contiguous), weight [d]
    rope_in_place: positions [tokens] int64, q [tokens, num_heads, head_dim], k [tokens,
        num_kv_heads, head_dim] (head rows contiguous), cos_sin [max_positions, head_dim] float32
    store_kv: k, v [tokens, num_kv_heads, head_dim] (one set of strides), one layer's pool
        [num_blocks, 2, block_size, num_kv_heads, head_dim], slots [tokens] int64 (negative: skip)

Each returns None where it does not apply (no compiler, a dtype other than fp32 / fp16 / bf16,
an fp8 or int8 pool, odd strides); the caller then runs its torch reference, which the kernel
equals bit for bit (RoPE, the store) or to the last bit of an output (RMSNorm: its sum of squares
in another order). A token's layer on the embedded model ran about forty torch ops for these,
a tenth of the CPU's decode step (bench/results/2026-12-08-cpu-decode-ops/).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import torch

from kvspill.kernels.cpu_build import BASE_FLAGS, c_pointer, load_library

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("cpu_decode_ops.cpp")
_HEADERS = (Path(__file__).with_name("cpu_half.h"),)  # included by _SOURCE
# No fused multiply-adds: each expression rounds as the torch ops it replaces.
_FLAGS = (*BASE_FLAGS, "-ffp-contract=off")
_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_i64 = ctypes.c_int64


@functools.cache
def load_kernel() -> ctypes.CDLL | None:
    """The compiled kernel, or None (logged once) when it cannot be built here."""
    return load_library(
        "CPU decode ops",
        _SOURCE,
        _HEADERS,
        _FLAGS,
        ("kvspill_cpu_add_rms_norm", "kvspill_cpu_rope", "kvspill_cpu_store_kv"),
        "RMSNorm, RoPE and the K/V store on the CPU run as torch ops, a few percent slower",
        logger,
    )


def _threads() -> ctypes.c_int:
    """torch's thread count for the kernel's OpenMP team (prefill rows; decode's few run on one)."""
    return ctypes.c_int(torch.get_num_threads())


def _host_rows(*tensors: torch.Tensor) -> bool:
    """Every tensor on the CPU in a dtype the kernel knows, its last dim contiguous."""
    return all(t.device.type == "cpu" and t.dtype in _DTYPE_CODES and t.stride(-1) == 1 for t in tensors)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight * norm(x + residual), x + residual) as `RMSNorm.forward` gives them (residual None:
    (weight * norm(x), None)); None where the kernel does not apply."""
    lib = load_kernel()
    if lib is None or x.dim() != 2 or not _host_rows(x, weight) or weight.dim() != 1:
        return None
    if residual is not None and (residual.dtype != x.dtype or residual.stride() != x.stride()):
        return None
    rows, d = x.shape
    out = torch.empty((rows, d), dtype=torch.promote_types(weight.dtype, x.dtype))
    residual_out = None if residual is None else torch.empty((rows, d), dtype=x.dtype)
    status = lib.kvspill_cpu_add_rms_norm(
        c_pointer(x), None if residual is None else c_pointer(residual), _i64(x.stride(0)),
        ctypes.c_int(_DTYPE_CODES[x.dtype]), c_pointer(weight), ctypes.c_int(_DTYPE_CODES[weight.dtype]),
        c_pointer(out), _i64(d), ctypes.c_int(_DTYPE_CODES[out.dtype]),
        None if residual_out is None else c_pointer(residual_out), _i64(d), _i64(rows), _i64(d), ctypes.c_float(eps),
        _threads(),
    )  # fmt: skip
    assert status == 0, f"CPU RMSNorm refused its arguments (status {status})"
    return out, residual_out


def rope_in_place(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """q and k rotated in place, as `apply_rotary_ref` rotates them (in their dtype), and
    returned; None where the kernel does not apply."""
    lib = load_kernel()
    if (
        lib is None
        or q.dim() != 3
        or k.dim() != 3
        or q.dtype != k.dtype
        or q.shape[-1] != k.shape[-1]
        or q.shape[-1] % 2
        or q.shape[0] != k.shape[0]
        or not _host_rows(q, k)
        or cos_sin.dtype != torch.float32
        or cos_sin.shape[-1] != q.shape[-1]
        or cos_sin.stride(-1) != 1
        or positions.dtype != torch.int64
        or not positions.is_contiguous()
    ):
        return None
    status = lib.kvspill_cpu_rope(
        c_pointer(q), _i64(q.stride(0)), _i64(q.stride(1)), _i64(q.shape[1]),
        c_pointer(k), _i64(k.stride(0)), _i64(k.stride(1)), _i64(k.shape[1]), _i64(q.shape[2]),
        ctypes.c_int(_DTYPE_CODES[q.dtype]), c_pointer(positions), _i64(q.shape[0]),
        c_pointer(cos_sin), _i64(cos_sin.stride(0)), _i64(cos_sin.shape[0]), _threads(),
    )  # fmt: skip
    if status == 2:
        raise IndexError(f"a RoPE position is outside the table's {cos_sin.shape[0]} positions")
    assert status == 0, f"CPU RoPE refused its arguments (status {status})"
    return q, k


def store_kv(k: torch.Tensor, v: torch.Tensor, kv_layer: torch.Tensor, slot_mapping: torch.Tensor) -> bool:
    """k, v written into their slots of `kv_layer` in its dtype, as `store_kv_ref` writes them;
    False (nothing written) where the kernel does not apply."""
    lib = load_kernel()
    if (
        lib is None
        or k.dim() != 3
        or k.shape != v.shape
        or k.stride() != v.stride()
        or k.dtype != v.dtype
        or kv_layer.dim() != 5
        or kv_layer.shape[-1] != k.shape[-1]
        or kv_layer.shape[-2] != k.shape[-2]
        or not _host_rows(k, v, kv_layer)
        or slot_mapping.dtype != torch.int64
        or not slot_mapping.is_contiguous()
        or slot_mapping.shape[0] != k.shape[0]
    ):
        return False
    block_stride, kv_stride, slot_stride, head_stride, _ = kv_layer.stride()
    status = lib.kvspill_cpu_store_kv(
        c_pointer(k), c_pointer(v), _i64(k.stride(0)), _i64(k.stride(1)), ctypes.c_int(_DTYPE_CODES[k.dtype]),
        _i64(k.shape[0]), _i64(k.shape[1]), _i64(k.shape[2]), c_pointer(kv_layer),
        ctypes.c_int(_DTYPE_CODES[kv_layer.dtype]), _i64(block_stride), _i64(kv_stride), _i64(slot_stride),
        _i64(head_stride), _i64(kv_layer.shape[2]), _i64(kv_layer.shape[0]), c_pointer(slot_mapping), _threads(),
    )  # fmt: skip
    if status == 2:
        raise IndexError(f"a slot is past the pool's {kv_layer.shape[0]} blocks of {kv_layer.shape[2]}")
    assert status == 0, f"CPU K/V store refused its arguments (status {status})"
    return True
