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

Invariant: pools of every tier hold one dtype (`KVLayout.dtype`); converting happens only here
(store) and in the attention readers (load).
"""

from __future__ import annotations

import torch

from kvspill.config import KV_CACHE_DTYPES
from kvspill.errors import InvalidParameterError

_FP8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def kv_storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype the KV pools hold for `--kv-cache-dtype`."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype not in _FP8:
        raise InvalidParameterError(
            "kv_cache_dtype", f"--kv-cache-dtype must be one of {KV_CACHE_DTYPES}, got {kv_cache_dtype!r}"
        )
    return _FP8[kv_cache_dtype]


def quantize_kv(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in the pool's dtype: fp8 saturates at the format's largest finite value; others cast."""
    if dtype in FP8_DTYPES:
        limit = torch.finfo(dtype).max
        return x.float().clamp(-limit, limit).to(dtype)
    return x.to(dtype)


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value of an fp8 pool dtype; 0.0 for other dtypes (kernels: no saturation)."""
    return float(torch.finfo(dtype).max) if dtype in FP8_DTYPES else 0.0
