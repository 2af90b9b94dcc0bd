"""KV cache formats (`--kv-cache-dtype`, vLLM's flag): which dtype the KV pools hold, and the
conversion at store time.

- "auto": the model's dtype (no conversion).
- "fp8" / "fp8_e4m3": float8_e4m3fn (3 mantissa bits, finite range +-448);
  "fp8_e5m2": float8_e5m2 (2 mantissa bits, range +-57344).
  fp8 KV uses one scale per tensor, 1.0 (vLLM's default without calibrated scales: K and V of the
  Llama-family models tested stay well inside +-448, see bench/results/2026-11-26-kv-fp8/), so a
  stored value is the value itself rounded to fp8; values beyond the format's range saturate
  (a plain cast would turn them into NaN in e4m3fn). Every reader converts with `.float()` or
  `tl.load(...).to(tl.float32)`: no scale to apply. Halves every tier's bytes against bf16.
- "int8": symmetric int8 with one fp32 scale per token and kv head (absmax / 127, rounded to
  nearest even). The pool is an int8 tensor shaped like the others but with rows of
  `head_dim + INT8_SCALE_BYTES` (the bytes of rows that would end with their scale); a
  block's region of one layer ([2, block_size, num_kv_heads, head_dim + 4] bytes, contiguous) is
  laid out as two planes instead:
      values [2, block_size, num_kv_heads, head_dim] int8, then scales [2, block_size, num_kv_heads] fp32
  (`int8_planes`). Every value row starts at a multiple of head_dim bytes, so the kernels' loads
  are 16-byte wide (rows of head_dim + 4 bytes allowed only byte loads: the decode kernel took
  1.57x as long, bench/results/2026-11-27-h200-int8-row-alignment/). A block's bytes still carry
  their scales, so every block move between tiers (copies, disk, persistence, prefix cache)
  needs no change; code that reads or writes single rows goes through `int8_planes` (Python) or
  `kv_strides` + `int8_scale_index` (Triton). Value = int8 * scale; |x - value| <= scale / 2.
  A row of zeros stores scale 0. Per K/V element: 1 + 4 / head_dim bytes (1.03 for head_dim
  128), against bf16's 2.
  int8 pools hold K and V in a rotated basis: the attention backend (runner/attention.py) turns
  q, k and v (after RoPE) by the normalized Hadamard matrix H (`hadamard`, symmetric and
  orthogonal: H @ H = I) before storing and attending, and the output back by H. q.k and the
  softmax are unchanged, but a key's outlier channels are spread over all of its head_dim, so its
  per-row scale no longer follows one large channel: on SmolLM2 the teacher-forced mean KL drops
  from 7.3e-4 to 2.3e-4 and top-1 agreement rises from 0.989 to 0.992
  (bench/results/2026-11-26-kv-fp8/). Every reader sees rotated K/V and rotated q: no kernel
  knows about the rotation.

Invariant: pools of every tier hold one dtype (`KVLayout.dtype`) and one row width
(`KVLayout.row_dim`); converting happens only here (store) and in the attention readers (load).
An int8 block region is only meaningful whole: slice blocks, never tokens or rows, of an int8
pool before `int8_planes` / `dequantize_kv`.
"""

from __future__ import annotations

import torch

from kvspill.config import KV_CACHE_DTYPES
from kvspill.errors import InvalidParameterError

_FP8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
INT8_SCALE_BYTES = 4  # one fp32 scale at the end of each int8 row
INT8_MAX = 127.0


def kv_storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype the KV pools hold for `--kv-cache-dtype`."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype == "int8":
        return torch.int8
    if kv_cache_dtype not in _FP8:
        raise InvalidParameterError(
            "kv_cache_dtype", f"--kv-cache-dtype must be one of {KV_CACHE_DTYPES}, got {kv_cache_dtype!r}"
        )
    return _FP8[kv_cache_dtype]


def row_dim(head_dim: int, dtype: torch.dtype) -> int:
    """Elements of one stored (token, kv head) row: head_dim, plus the scale's bytes for int8."""
    return head_dim + INT8_SCALE_BYTES if dtype == torch.int8 else head_dim


def value_dim(kv: torch.Tensor) -> int:
    """head_dim of a pool (or a view of it) whose last dim is the stored row."""
    return kv.shape[-1] - INT8_SCALE_BYTES if kv.dtype == torch.int8 else kv.shape[-1]


def int8_planes(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of int8 block regions [..., 2, block_size, num_kv_heads, head_dim + 4] (the last four
    dims contiguous): (values [..., 2, block_size, num_kv_heads, head_dim] int8,
    scales [..., 2, block_size, num_kv_heads] fp32). Writing through them writes the pool."""
    assert blocks.dtype == torch.int8, f"int8_planes of a {blocks.dtype} pool"
    *lead, two, block_size, heads, row = blocks.shape
    head_dim = row - INT8_SCALE_BYTES
    region = blocks.flatten(-4)  # a view: the region is contiguous (asserted by flatten's view)
    assert region.stride(-1) == 1 and region.data_ptr() == blocks.data_ptr()
    split = two * block_size * heads * head_dim
    values = region[..., :split].unflatten(-1, (two, block_size, heads, head_dim))
    scales = region[..., split:].view(torch.float32).unflatten(-1, (two, block_size, heads))
    return values, scales


def kv_strides(kv_layer: torch.Tensor) -> tuple[int, int, int, int]:
    """Element strides (block, K/V, token slot, kv head) of the stored values of a layer view
    [num_blocks, 2, block_size, num_kv_heads, row_dim], as the Triton kernels take them: the
    view's own, or an int8 pool's value plane (`int8_planes`; scales at `int8_scale_index`)."""
    if kv_layer.dtype != torch.int8:
        return kv_layer.stride(0), kv_layer.stride(1), kv_layer.stride(2), kv_layer.stride(3)
    _, two, block_size, heads, row = kv_layer.shape
    region = (block_size * heads * row, heads * row, row, 1)
    assert kv_layer.stride()[1:] == region, "an int8 layer view's block regions must be contiguous"
    head_dim = row - INT8_SCALE_BYTES
    return kv_layer.stride(0), block_size * heads * head_dim, heads * head_dim, head_dim


def quantize_int8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., head_dim] (any float dtype) -> (values round(x / scale) int8 [..., head_dim],
    scales [...] fp32) with scale = absmax(row) / 127 (round half to even). The Triton store
    kernels compute the same numbers (`store_kv.int8_quantize`)."""
    xf = x.float()
    scale = xf.abs().amax(-1) / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe[..., None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def int8_scales(kv: torch.Tensor) -> torch.Tensor:
    """The fp32 scales of int8 block regions [..., 2, block_size, num_kv_heads, head_dim + 4] ->
    [..., 2, block_size, num_kv_heads] (a copy)."""
    return int8_planes(kv)[1].clone()


def dequantize_kv(kv: torch.Tensor) -> torch.Tensor:
    """Stored blocks of any pool format -> fp32 values [..., head_dim] (int8: whole block regions
    [..., 2, block_size, num_kv_heads, head_dim + 4], each value times its row's scale)."""
    if kv.dtype != torch.int8:
        return kv.float()
    values, scales = int8_planes(kv)
    return values.float() * scales.unsqueeze(-1)


def quantize_kv(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in the pool's format. int8: x holds whole blocks [..., 2, block_size, num_kv_heads,
    head_dim] and the result is their regions (`int8_planes`); fp8 saturates at the format's
    largest finite value; others cast."""
    if dtype == torch.int8:
        *lead, two, block_size, heads, head_dim = x.shape
        out = torch.empty((*lead, two, block_size, heads, head_dim + INT8_SCALE_BYTES), dtype=torch.int8,
                          device=x.device)  # fmt: skip
        values, scales = int8_planes(out)
        values[...], scales[...] = quantize_int8_rows(x)
        return out
    if dtype in FP8_DTYPES:
        limit = torch.finfo(dtype).max
        return x.float().clamp(-limit, limit).to(dtype)
    return x.to(dtype)


def stored_values(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x [..., head_dim] as a `dtype` pool stores it and a reader gets it back, in fp32 (any
    leading shape: int8 rows each with their own scale)."""
    if dtype == torch.int8:
        q, scale = quantize_int8_rows(x)
        return q.float() * scale[..., None]
    return quantize_kv(x, dtype).float()


def store_rows(blocks: torch.Tensor, index: tuple[torch.Tensor | int, ...], x: torch.Tensor) -> None:
    """Write rows x [n, num_kv_heads, head_dim] at blocks[index] (an advanced index over the
    dims before the heads, e.g. (block ids, K/V, slots)) in the pool's format, in place."""
    if blocks.dtype == torch.int8:
        values, scales = int8_planes(blocks)
        values[index], scales[index] = quantize_int8_rows(x)
    else:
        blocks[index] = quantize_kv(x, blocks.dtype)


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value of an fp8 pool dtype; 0.0 for other dtypes (kernels: no saturation)."""
    return float(torch.finfo(dtype).max) if dtype in FP8_DTYPES else 0.0


def scale_view(kv_layer: torch.Tensor) -> torch.Tensor:
    """The tensor a Triton kernel reads/writes int8 scales through: the same memory as fp32
    (`int8_scale_index`; every stride of an int8 pool is a multiple of 4). For other formats the
    pool itself (the kernels then never touch it)."""
    return kv_layer.view(torch.float32) if kv_layer.dtype == torch.int8 else kv_layer


def hadamard(n: int) -> torch.Tensor:
    """The normalized Sylvester Hadamard matrix [n, n] float32 (n a power of two): entries
    +-1/sqrt(n), symmetric, its own inverse."""
    assert n > 0 and n & (n - 1) == 0, f"head_dim {n} must be a power of two"
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n**0.5


def rotate(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """x [..., head_dim] @ rotation in fp32 (the int8 format's basis change), as fp32."""
    return x.float() @ rotation


def rotate_rows(xs: tuple[torch.Tensor, ...], rotation: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`rotate` of several tensors [..., head_dim] as one matmul over their stacked rows.

    One launch instead of one per tensor, and a row count cuBLAS serves well: a decode step's k
    or v alone is 8 rows, whose fp32 [8, 128] @ [128, 128] took 53 us on an H200 (a poorly
    chosen kernel) against 5 us for q's 32 rows: 3.4 ms of a 10 ms W3 int8 decode step."""
    dim = rotation.shape[0]
    flat = torch.cat([x.float().reshape(-1, dim) for x in xs]) @ rotation
    out, start = [], 0
    for x in xs:
        n = x.numel() // dim
        out.append(flat[start : start + n].view(*x.shape[:-1], dim))
        start += n
    return tuple(out)
