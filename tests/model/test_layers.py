"""RMSNorm, SiLU-and-mul and RoPE tables against transformers' own modules."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kvspill.model.layers import RMSNorm, RotaryEmbedding, SiluAndMul, build_cos_sin_cache, compute_inv_freq
from kvspill.model.loader import apply_rope_override

HEAD_DIM = 32
MAX_POS = 512
SCALINGS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 128,
    },
    "longrope": {
        "rope_type": "longrope",
        "long_factor": [1.0 + 0.5 * i for i in range(HEAD_DIM // 2)],
        "short_factor": [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)],
        "original_max_position_embeddings": 128,
    },
}


def _config(scaling: dict[str, Any] | None, max_pos: int = MAX_POS):  # -> LlamaConfig
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM,
        max_position_embeddings=max_pos, rope_theta=50000.0, rope_scaling=copy.deepcopy(scaling),
    )  # fmt: skip


def _hf_cos_sin(config: Any, num_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rotary = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, torch.arange(num_positions)[None])
    return cos[0], sin[0]  # [num_positions, head_dim] each (halves duplicated)


def _ours_cos_sin(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = cache.chunk(2, dim=-1)
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


@pytest.mark.parametrize("rope_type", list(SCALINGS))
def test_rope_table_equals_hf(rope_type: str) -> None:
    config = _config(SCALINGS[rope_type])
    # Within the original length HF uses the unscaled dynamic table and the short longrope factors.
    num_positions = 128 if rope_type in ("dynamic", "longrope") else MAX_POS
    cache = build_cos_sin_cache(config, num_positions)
    assert cache.shape == (num_positions, HEAD_DIM) and cache.dtype == torch.float32
    cos, sin = _ours_cos_sin(cache)
    ref_cos, ref_sin = _hf_cos_sin(config, num_positions)
    torch.testing.assert_close(cos, ref_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, ref_sin, rtol=0, atol=1e-6)


def test_attention_scaling_is_in_the_table() -> None:
    _, yarn_scale = compute_inv_freq(_config(SCALINGS["yarn"]), MAX_POS)
    assert yarn_scale == pytest.approx(0.1 * torch.log(torch.tensor(4.0)).item() + 1.0)
    _, long_scale = compute_inv_freq(_config(SCALINGS["longrope"]), MAX_POS)
    assert long_scale > 1.0
    cache = build_cos_sin_cache(_config(SCALINGS["yarn"]), 4)
    # cos^2 + sin^2 = scale^2 at every position
    cos, sin = cache.chunk(2, dim=-1)
    torch.testing.assert_close(cos**2 + sin**2, torch.full_like(cos, yarn_scale**2))


def test_longrope_past_original_uses_long_factors() -> None:
    config = _config(SCALINGS["longrope"])
    cos, sin = _ours_cos_sin(build_cos_sin_cache(config, MAX_POS))
    ref_cos, ref_sin = _hf_cos_sin(config, MAX_POS)  # HF switches to long at seq_len > 128
    torch.testing.assert_close(cos, ref_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, ref_sin, rtol=0, atol=1e-6)


def test_dynamic_override_uses_table_for_max_model_len() -> None:
    """--rope-scaling dynamic:4 on a 128-position model: the table HF computes at 512 tokens."""
    config = _config(None, max_pos=128)
    apply_rope_override(config, {"rope_type": "dynamic", "factor": 4.0})
    assert config.max_position_embeddings == 512
    cos, sin = _ours_cos_sin(build_cos_sin_cache(config, 512))
    reference = _config(SCALINGS["dynamic"], max_pos=128)  # HF's view: trained 128, grows with seq_len
    ref_cos, ref_sin = _hf_cos_sin(reference, 512)
    torch.testing.assert_close(cos, ref_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, ref_sin, rtol=0, atol=1e-6)


def test_rope_override_llama3_defaults_and_theta_kept() -> None:
    config = _config(None, max_pos=128)
    apply_rope_override(config, {"rope_type": "llama3", "factor": 8.0})
    params = config.rope_parameters
    assert params["rope_theta"] == 50000.0 and params["low_freq_factor"] == 1.0
    assert params["original_max_position_embeddings"] == 128 and config.max_position_embeddings == 1024
    ref_cos, _ = _hf_cos_sin(config, 1024)
    torch.testing.assert_close(
        _ours_cos_sin(build_cos_sin_cache(config, 1024))[0], ref_cos, rtol=0, atol=1e-6
    )


def test_rotary_module_applies_table_like_hf() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    config = _config(SCALINGS["yarn"])
    rotary = RotaryEmbedding(config, HEAD_DIM, MAX_POS)
    positions = torch.tensor([0, 5, 9, 300, 511])
    q, k = torch.randn(5, 4, HEAD_DIM), torch.randn(5, 2, HEAD_DIM)
    q_out, k_out = rotary(positions, q.clone(), k.clone())  # rotated in place where a kernel runs
    cos, sin = _hf_cos_sin(config, MAX_POS)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos[positions], sin[positions], unsqueeze_dim=1)
    torch.testing.assert_close(q_out, q_ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(k_out, k_ref, rtol=0, atol=1e-6)


def test_rotary_on_meta_then_init() -> None:
    with torch.device("meta"):
        rotary = RotaryEmbedding(_config(None), HEAD_DIM, 64)
    assert rotary.cos_sin_cache.is_meta
    rotary.to_empty(device=torch.device("cpu"))
    rotary.init_buffers()
    torch.testing.assert_close(rotary.cos_sin_cache, build_cos_sin_cache(_config(None), 64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_hf(dtype: torch.dtype) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    ref = LlamaRMSNorm(64, eps=1e-5).to(dtype)
    ours = RMSNorm(64, eps=1e-5, dtype=dtype)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(64))
        ours.weight.copy_(ref.weight)
    x, residual = torch.randn(7, 64, dtype=dtype), torch.randn(7, 64, dtype=dtype)
    assert torch.equal(ours(x), ref(x))
    out, new_residual = ours(x, residual)
    assert torch.equal(new_residual, x + residual)
    assert torch.equal(out, ref(x + residual))


def test_silu_and_mul() -> None:
    x = torch.randn(3, 2 * 16)
    torch.testing.assert_close(SiluAndMul()(x), F.silu(x[:, :16]) * x[:, 16:])
