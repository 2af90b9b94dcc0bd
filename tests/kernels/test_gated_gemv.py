"""SiLU-and-mul in the one-token gate_up GEMV's epilogue (kernels/gated_gemv.py): bit-equal to the
same GEMV's [1, 2 I] output then fused_ops.silu_and_mul, for dense, fp8 and Q4_K weights, with
ragged I (masked programs) and a bias."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels import gguf_gemv
from kvspill.kernels.fp8_gemv import GemvConfig, dense_gemv, fp8_gemv
from kvspill.kernels.fp8_linear import quantize_weight_fp8
from kvspill.kernels.fused_ops import silu_and_mul
from kvspill.kernels.gguf_formats import random_quantized


def _x(k: int, dtype: torch.dtype, device: str, seed: int = 0) -> torch.Tensor:
    # Large enough that silu's gate spans both signs and its saturated ends.
    return (torch.randn((1, k), generator=torch.Generator().manual_seed(seed)) * 3).to(dtype).to(device)


def _bias(rows: int, dtype: torch.dtype, device: str, with_bias: bool) -> torch.Tensor | None:
    return (
        (torch.randn(rows, generator=torch.Generator().manual_seed(9)) * 2).to(dtype).to(device)
        if with_bias
        else None
    )


@pytest.mark.parametrize("inter", [12, 21])  # 21: the last program's rows run past I
@pytest.mark.parametrize("config", [GemvConfig(8, 32, 1, 1), GemvConfig(16, 64, 2, 1)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dense_and_fp8_gated_equal_gemv_then_silu(inter, config, with_bias, dtype, device):
    k = 96
    x = _x(k, dtype, device)
    w = (torch.randn(2 * inter, k, generator=torch.Generator().manual_seed(1)) * 0.3).to(dtype).to(device)
    bias = _bias(2 * inter, dtype, device, with_bias)
    fused = dense_gemv(x, w, bias, config=config, silu_mul=True)
    assert fused.shape == (1, inter) and fused.dtype == dtype
    assert torch.equal(fused, silu_and_mul(dense_gemv(x, w, bias, config=config)))
    w_fp8, w_scale = quantize_weight_fp8(w.float().cpu())
    w_fp8, w_scale = w_fp8.to(device), w_scale.to(device)
    fused = fp8_gemv(x, w_fp8, w_scale, bias, config=config, silu_mul=True)
    assert torch.equal(fused, silu_and_mul(fp8_gemv(x, w_fp8, w_scale, bias, config=config)))


@pytest.mark.parametrize("config", [(2048, 8, 1), (1024, 16, 2)])
@pytest.mark.parametrize("inter", [12, 21])
@pytest.mark.parametrize("with_bias", [False, True])
def test_q4k_gated_equals_gemv_then_silu(config, inter, with_bias, device, monkeypatch):
    monkeypatch.setenv("KVSPILL_INT16_X", "1")
    monkeypatch.setattr(gguf_gemv, "Q4K_INT16X_CONFIGS", ((0, 0, config),))
    k = 3 * 256  # the K loop's last step reads past the end for both chunks
    weight = random_quantized("Q4_K", 2 * inter, k, torch.Generator().manual_seed(4)).to(device)
    x = _x(k, torch.bfloat16, device, seed=5)
    bias = _bias(2 * inter, torch.bfloat16, device, with_bias)
    assert gguf_gemv.fuses_silu_mul(x, weight)
    fused = gguf_gemv.quant_matmul_gemv(x, weight, bias, silu_mul=True)
    assert fused.shape == (1, inter)
    assert torch.equal(fused, silu_and_mul(gguf_gemv.quant_matmul_gemv(x, weight, bias)))


def test_q4k_fuses_only_where_the_int16x_kernel_runs(device, monkeypatch):
    weight = random_quantized("Q4_K", 16, 256, torch.Generator().manual_seed(6)).to(device)
    x = _x(256, torch.bfloat16, device)
    monkeypatch.setenv("KVSPILL_INT16_X", "1")
    assert gguf_gemv.fuses_silu_mul(x, weight)
    assert not gguf_gemv.fuses_silu_mul(x.float(), weight)  # fp32 x: the exact lanes
    assert not gguf_gemv.fuses_silu_mul(torch.cat([x, x]), weight)  # two tokens
    q6 = random_quantized("Q6_K", 16, 256, torch.Generator().manual_seed(7)).to(device)
    assert not gguf_gemv.fuses_silu_mul(x, q6)
    monkeypatch.setenv("KVSPILL_INT16_X", "0")
    assert not gguf_gemv.fuses_silu_mul(x, weight)
