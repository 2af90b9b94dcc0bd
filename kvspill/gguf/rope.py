"""A GGUF file's RoPE scaling as the HF config's RoPE parameters (transformers' GGUF config
conversion drops it, and a model run with plain RoPE past its trained length reads garbage).

llama.cpp's converter writes it two ways:
- `{arch}.rope.scaling.type` linear / yarn with `.factor` and `.original_context_length`
  (Qwen2.5's yarn, CodeLlama's linear): the same parameters in HF's names.
- a `rope_freqs.weight` tensor (Llama 3.1 / 3.2 / 3.3): one divisor per frequency, computed from
  HF's llama3 parameters (factor, low / high frequency factor, original context). The header
  keeps only the tensor, so the parameters are found again: the llama3 divisors of each candidate
  are compared with the tensor's (within 1e-4), the first match wins, and the model then runs
  HF's own llama3 RoPE. A tensor no candidate explains is reported and left out (plain RoPE).

Invariant: a file without either gives None (its config is unchanged).
"""

from __future__ import annotations

import logging
import math
from typing import Any

logger = logging.getLogger(__name__)

# llama3 parameters tried, Meta's first (original 8192, low 1, high 4; factor 8 or 32 is read
# from the tensor). Only original / low and original / high shape the divisors, so low = 1 with
# every power-of-two original covers the releases and the tests' tiny models.
_LLAMA3_ORIGINALS = (8192, *(2**k for k in range(4, 21) if 2**k != 8192))
_LLAMA3_FREQ_FACTORS = ((1.0, 4.0), (1.0, 2.0), (1.0, 8.0))
_MATCH_RTOL = 1e-4


def gguf_rope_parameters(reader: Any, arch: str, head_dim: int, rope_theta: float) -> dict[str, Any] | None:
    """HF RoPE parameters (rope_type, factor, ...) of the GGUF `reader`, or None for plain RoPE."""
    freqs = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if freqs is not None:
        return _llama3_from_divisors([float(x) for x in freqs.data], head_dim, rope_theta)
    rope_type = str(_value(reader, f"{arch}.rope.scaling.type") or "none")
    if rope_type in ("none", ""):
        return None
    if rope_type not in ("linear", "yarn"):
        logger.warning("GGUF rope.scaling.type %r is not one kvspill reads: plain RoPE", rope_type)
        return None
    params: dict[str, Any] = {
        "rope_type": rope_type,
        "factor": float(_value(reader, f"{arch}.rope.scaling.factor") or 1.0),
    }
    original = _value(reader, f"{arch}.rope.scaling.original_context_length")
    if rope_type == "yarn" and original:
        params["original_max_position_embeddings"] = int(original)
    return params


def llama3_divisors(
    head_dim: int, rope_theta: float, factor: float, low: float, high: float, original: int
) -> list[float]:
    """What llama.cpp's converter writes to `rope_freqs` for these llama3 parameters."""
    low_wavelen, high_wavelen = original / low, original / high
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * rope_theta ** (i / head_dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def _llama3_from_divisors(divisors: list[float], head_dim: int, rope_theta: float) -> dict[str, Any] | None:
    factor = max(divisors)
    for original in _LLAMA3_ORIGINALS:
        for low, high in _LLAMA3_FREQ_FACTORS:
            expected = llama3_divisors(head_dim, rope_theta, factor, low, high, original)
            if len(expected) == len(divisors) and all(
                math.isclose(a, b, rel_tol=_MATCH_RTOL) for a, b in zip(expected, divisors, strict=True)
            ):
                return {
                    "rope_type": "llama3",
                    "factor": factor,
                    "low_freq_factor": low,
                    "high_freq_factor": high,
                    "original_max_position_embeddings": original,
                }
    logger.warning(
        "this GGUF's rope_freqs tensor matches no llama3 RoPE scaling kvspill knows: it runs plain "
        "RoPE (give the model's own with --rope-scaling, as JSON)"
    )
    return None


def _value(reader: Any, key: str) -> Any:
    field = reader.get_field(key)
    return None if field is None else field.contents()


def apply_gguf_rope(config: Any, params: dict[str, Any]) -> None:
    """Put `params` in `config` (transformers 5's rope_parameters, 4.x's rope_scaling). A yarn
    context past the header's length is the original length x factor, as vLLM takes it."""
    if hasattr(config, "standardize_rope_params"):
        old = dict(getattr(config, "rope_parameters", None) or {})
        theta = old.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        config.rope_parameters = {**params, "rope_theta": theta}
    else:
        config.rope_scaling = dict(params)
    original = params.get("original_max_position_embeddings")
    if params["rope_type"] == "yarn" and original:
        config.max_position_embeddings = max(config.max_position_embeddings, int(original * params["factor"]))
