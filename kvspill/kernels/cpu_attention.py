"""Attention on the CPU over KV blocks in a host pool, read in place through a block table.

Shapes:
    q:     [num_rows, num_heads, head_dim] (any float dtype; the kernel reads it as fp32)
    pool:  [num_blocks, num_layers, 2, block_size, num_kv_heads, row_dim], contiguous, on the host,
           or one layer of any host pool [num_blocks, 2, block_size, num_kv_heads, row_dim]
           (row_dim = head_dim, or head_dim + 4 for int8: kernels/kv_quant.py)
    parts: `CpuParts`: part p owns q rows [row_start[p], row_end[p]) and block ids
           block_ids[block_start[p] : block_start[p + 1]]; every row of a part sees every key of
           its blocks (cold blocks precede every query: no mask, see attention/cold/merge.py);
           with `last_tokens`, part p's last block holds only its first last_tokens[p] keys
           (a decode row's block being filled), the rest of that block is never read
    out:   o [num_rows, num_heads, head_dim] float32, lse [num_rows, num_heads] float32 (natural
           log); the parts' rows are written, other rows are left alone

`cpu_paged_attention` runs the C++/OpenMP kernel (`cpu_attention.cpp`, its AVX-512 paths in
`cpu_attention_avx512.h`): each byte of K and V is read once from the pool, converted to fp32 in
registers, never gathered; the blocks are cut into tasks over `num_threads` threads and the task
partials merge by LSE. The kernel is built on first use (kernels/cpu_build.py). `load_kernel()`
returns None, with one warning that says why and what to install, where it cannot be built;
callers then gather blocks and run torch's kernel
(attention/cold/dispatch.py). Why C++ and not torch ops over a blocked view: torch has no attention
over a block table, so each layer's blocks must first be gathered (a copy of every byte) and
its CPU flash kernel then reads them again; measured in `kvspill/bench/cpu_attention_bench.py`
(bench/results/2026-11-26-cpu-attention/).

Quantized pools: fp8 pools may carry one scale per layer for K and one for V (`KVScales`;
`--kv-cache-dtype fp8` stores with scale 1, kernels/kv_quant.py); int8 pools carry one fp32
scale per token and kv head in each block's scale plane (`kv_quant.int8_planes`), which the
kernel reads from the pool itself (passed a second time, as floats). The kernel multiplies while
converting, so quantized bytes are read once.

`cpu_paged_attention_ref` (gather, dequantize, softmax in fp32) is the oracle of the tests.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from kvspill.kernels.cpu_build import BASE_FLAGS, c_pointer, load_library
from kvspill.kernels.kv_quant import dequantize_kv, value_dim

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("cpu_attention.cpp")
_HEADERS = (Path(__file__).with_name("cpu_attention_avx512.h"),)  # included by _SOURCE
_DTYPE_CODES = {
    torch.float32: 0,
    torch.bfloat16: 1,
    torch.float16: 2,
    torch.float8_e4m3fn: 3,
    torch.float8_e5m2: 4,
    torch.int8: 5,
}
# Tasks per thread: a few more tasks than threads evens out parts of unequal length.
_TASKS_PER_THREAD = 4
_MIN_TASK_BLOCKS = 4  # below this a task's scratch setup costs more than its reads


@dataclass(frozen=True)
class CpuParts:
    """Which q rows attend which blocks (see the module docstring); int64 arrays."""

    block_ids: np.ndarray  # [num_blocks_total]
    block_start: np.ndarray  # [num_parts + 1]
    row_start: np.ndarray  # [num_parts]
    row_end: np.ndarray  # [num_parts]
    last_tokens: np.ndarray | None = None  # [num_parts], keys of each part's last block; None: all full

    def __post_init__(self) -> None:
        # Held as the kernel reads them (contiguous int64), once: a decode step's parts serve
        # every layer, and per-call conversions were a tenth of the embedded model's CPU step.
        names = ("block_ids", "block_start", "row_start", "row_end") + (
            () if self.last_tokens is None else ("last_tokens",)
        )
        for name in names:
            object.__setattr__(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.int64))

    @functools.cached_property
    def largest_id(self) -> int:
        """The largest block id (-1 with none); ids below 0 fail here."""
        if not len(self.block_ids):
            return -1
        assert int(self.block_ids.min()) >= 0, "negative block id"
        return int(self.block_ids.max())

    @functools.cached_property
    def pointers(self) -> tuple[ctypes.c_void_p | None, ...]:
        """The kernel's arguments ids, block_start, row_start, row_end, last_tokens (or None)."""
        arrays = (self.block_ids, self.block_start, self.row_start, self.row_end)
        return (
            *(c_pointer(a) for a in arrays),
            None if self.last_tokens is None else c_pointer(self.last_tokens),
        )

    @staticmethod
    def single(block_ids: np.ndarray | list[int], row_start: int, row_end: int) -> CpuParts:
        ids = np.asarray(block_ids, dtype=np.int64)
        return CpuParts(
            ids,
            np.array([0, len(ids)], dtype=np.int64),
            np.array([row_start], dtype=np.int64),
            np.array([row_end], dtype=np.int64),
        )

    @property
    def num_parts(self) -> int:
        return len(self.row_start)


@functools.cache
def load_kernel() -> ctypes.CDLL | None:
    """The compiled kernel, or None (logged once) when it cannot be built here."""
    return load_library(
        "CPU attention",
        _SOURCE,
        _HEADERS,
        BASE_FLAGS,
        ("kvspill_cpu_attend",),
        "CPU attention over cold KV gathers its blocks and runs torch's kernel instead, several times slower",
        logger,
    )


def _split_blocks(num_blocks: int, num_threads: int) -> int:
    return max(_MIN_TASK_BLOCKS, -(-num_blocks // (_TASKS_PER_THREAD * num_threads)))


@dataclass(frozen=True)
class KVScales:
    """How an fp8 pool's bytes become values: x = stored * scale, one scale per layer for K and
    for V (`layer_scales` [num_layers, 2]). int8 pools carry their own per-row scales."""

    layer_scales: torch.Tensor | None = None


def cpu_paged_attention(
    q: torch.Tensor,
    pool: torch.Tensor,
    layer_idx: int,
    parts: CpuParts,
    scale: float,
    out: tuple[torch.Tensor, torch.Tensor],
    num_threads: int | None = None,
    scales: KVScales | None = None,
) -> None:
    """Write the parts' rows of out = (o, lse) with the C++ kernel (`load_kernel()` must not be None).
    `pool`: a whole uniform pool (6 dims) or one layer's view of any pool (5 dims, `layer_idx`
    then names it for `scales` only); the kernel reads the layer through the view's pointer and
    block stride, so a mixed pool's layer (storage/layout.py) reads like any other."""
    lib = load_kernel()
    assert lib is not None, "no CPU attention kernel: callers check load_kernel() first"
    o, lse = out
    kv_layer = _layer_view(pool, layer_idx)
    num_blocks, two, block_size, num_kv_heads, row = kv_layer.shape
    head_dim = value_dim(kv_layer)
    region = (block_size * num_kv_heads * row, num_kv_heads * row, row, 1)
    assert two == 2 and kv_layer.stride()[1:] == region and kv_layer.device.type == "cpu", (
        "pool: a host tensor whose block regions are contiguous"
    )
    assert o.dtype == lse.dtype == torch.float32 and o.is_contiguous() and lse.is_contiguous()
    assert q.shape == o.shape and q.shape[2] == head_dim and q.shape[1] % num_kv_heads == 0
    assert kv_layer.dtype in _DTYPE_CODES, f"no CPU attention for KV dtype {kv_layer.dtype}"
    assert parts.largest_id < num_blocks, "block id outside the pool"
    q32 = q.to(torch.float32).contiguous()
    k_scale, v_scale = _layer_scales(kv_layer.dtype, scales, layer_idx)
    per_row = kv_layer.dtype == torch.int8
    # Offsets from the layer's first element. Values: rows of `row` elements; int8 regions are a
    # value plane of head_dim-byte rows, then the rows' fp32 scales in the same order
    # (kernels/kv_quant.py): float offsets = bytes / 4, read through the same pointer.
    value_row = head_dim if per_row else row
    v_off = block_size * num_kv_heads * value_row
    k_scale_off = 2 * block_size * num_kv_heads * head_dim // 4 if per_row else 0
    v_scale_off = k_scale_off + block_size * num_kv_heads if per_row else 0
    block_stride = kv_layer.stride(0)
    threads = num_threads or torch.get_num_threads()
    i64, f32 = ctypes.c_int64, ctypes.c_float
    status = lib.kvspill_cpu_attend(
        c_pointer(q32), i64(q.shape[1]), c_pointer(kv_layer), ctypes.c_int(_DTYPE_CODES[kv_layer.dtype]),
        i64(block_stride), i64(0), i64(v_off),
        i64(block_size), i64(num_kv_heads), i64(head_dim), i64(value_row),
        c_pointer(kv_layer) if per_row else None,
        i64(block_stride // 4 if per_row else 0),
        i64(k_scale_off), i64(v_scale_off), i64(1 if per_row else 0), f32(k_scale), f32(v_scale),
        *parts.pointers, i64(parts.num_parts), f32(scale),
        i64(_split_blocks(len(parts.block_ids), threads)), ctypes.c_int(threads), c_pointer(o), c_pointer(lse),
    )  # fmt: skip
    if status == 2:
        raise ValueError(
            "cpu_paged_attention: last_tokens must lie in 1 .. block_size for every part with blocks"
        )
    if status != 0:
        raise ValueError(
            f"cpu_paged_attention: num_heads must be a multiple of num_kv_heads (status {status})"
        )


def _layer_view(pool: torch.Tensor, layer_idx: int) -> torch.Tensor:
    """Layer `layer_idx` of a whole uniform pool (6 dims); a layer view (5 dims) as it is."""
    return pool[:, layer_idx] if pool.dim() == 6 else pool


def _layer_scales(dtype: torch.dtype, scales: KVScales | None, layer_idx: int) -> tuple[float, float]:
    """(K scale, V scale) of one layer for the kernel (1.0 without per-layer scales)."""
    if dtype == torch.int8 or scales is None or scales.layer_scales is None:
        return 1.0, 1.0
    k_scale, v_scale = (float(x) for x in scales.layer_scales[layer_idx])
    return k_scale, v_scale


def dequantize_blocks(kv: torch.Tensor, layer_idx: int, scales: KVScales | None) -> torch.Tensor:
    """kv [n, 2, block_size, num_kv_heads, row_dim] of one layer -> float32 values [..., head_dim]."""
    x = dequantize_kv(kv)  # int8: times each row's own scale
    if kv.dtype != torch.int8 and scales is not None and scales.layer_scales is not None:
        return x * scales.layer_scales[layer_idx].view(1, 2, 1, 1, 1)
    return x


def cpu_paged_attention_ref(
    q: torch.Tensor,
    pool: torch.Tensor,
    layer_idx: int,
    parts: CpuParts,
    scale: float,
    out: tuple[torch.Tensor, torch.Tensor],
    scales: KVScales | None = None,
) -> None:
    """The oracle: gather each part's blocks, dequantize, plain softmax attention in fp32."""
    o, lse = out
    kv_layer = _layer_view(pool, layer_idx)
    num_kv_heads, head_dim = kv_layer.shape[-2], value_dim(kv_layer)
    for p in range(parts.num_parts):
        r0, r1 = int(parts.row_start[p]), int(parts.row_end[p])
        index = torch.from_numpy(
            np.ascontiguousarray(parts.block_ids[parts.block_start[p] : parts.block_start[p + 1]])
        )
        kv = dequantize_blocks(kv_layer.index_select(0, index), layer_idx, scales)
        k = kv[:, 0].reshape(-1, num_kv_heads, head_dim)  # [num_keys, kv, dim]
        v = kv[:, 1].reshape(-1, num_kv_heads, head_dim)
        if parts.last_tokens is not None and len(index):  # the last block's unfilled tail
            keys = len(k) - kv.shape[2] + int(parts.last_tokens[p])
            k, v = k[:keys], v[:keys]
        qg = q[r0:r1].float().unflatten(1, (num_kv_heads, -1))  # [rows, kv, group, dim]
        s = torch.einsum("rkgd,nkd->rkgn", qg, k) * scale
        lse_p = torch.logsumexp(s, -1)  # -inf with no keys
        o_p = torch.einsum("rkgn,nkd->rkgd", torch.softmax(s, -1), v) if len(k) else torch.zeros_like(qg)
        o[r0:r1] = o_p.flatten(1, 2)
        lse[r0:r1] = lse_p.flatten(1, 2)
