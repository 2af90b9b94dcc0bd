"""A norm handoff (kernels/norm_handoff.NormHandoff) on the one-token int16-x GEMVs of Q4_K, Q5_K and
Q6_K (kernels/gguf_gemv.quant_gemv_fused) and the mixed qkv launch (kernels/gguf_gemv_mixed): a
producer adds into the residual stream as the RMSNorm kernel does and hands on h * weight and its
programs' sums of h^2; a consumer's output is its GEMV of those values scaled by rstd."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvspill.kernels import gguf_gemv
from kvspill.kernels.fp8_gemv import GemvFusion, handed_over
from kvspill.kernels.fused_ops import rms_norm
from kvspill.kernels.gguf_formats import random_quantized, split_q6k_rows
from kvspill.kernels.gguf_gemv import quant_gemv_fused, quant_matmul_gemv
from kvspill.kernels.gguf_gemv_mixed import mixed_gemv
from kvspill.kernels.norm_handoff import NormHandoff

K = 2 * 256  # the consumer's K: the producer's rows
ROWS = 37  # not a multiple of a program's rows: the tail program's padded rows
EPS = 1e-5


def _weight(qtype: str, rows: int, k: int, seed: int, split: bool = False):
    weight = random_quantized(qtype, rows, k, torch.Generator().manual_seed(seed))
    return replace(weight, data=split_q6k_rows(weight.data), split=True) if split else weight


def _x(k: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn((1, k), generator=torch.Generator().manual_seed(seed)) * scale).to(torch.bfloat16)


@pytest.mark.parametrize(
    ("qtype", "split"), [("Q4_K", False), ("Q5_K", False), ("Q6_K", False), ("Q6_K", True)]
)
def test_a_producer_adds_into_the_stream_and_hands_on_the_norm(qtype, split, device):
    """The stream is the GEMV then the RMSNorm kernel's add, bit for bit; `scaled` is h * weight to
    one bf16 step (the interpreter rounds to bf16 toward zero), `sums` add up to sum(h^2)."""
    weight = _weight(qtype, ROWS, K, 0, split).to(device)
    x, residual = _x(K, 1).to(device), _x(ROWS, 2, scale=3.0).to(device)
    norm_weight = (1 + 0.1 * torch.randn(ROWS, generator=torch.Generator().manual_seed(3))).to(torch.bfloat16)
    norm_weight = norm_weight.to(device)
    stream, handoff = residual.clone(), NormHandoff(norm_weight, EPS)
    assert quant_gemv_fused(x, weight, None, GemvFusion(residual=stream, handoff=handoff)) is stream
    _, want = rms_norm(quant_matmul_gemv(x, weight), torch.ones_like(norm_weight), EPS, residual)
    assert torch.equal(stream, want)
    h = stream.float()
    torch.testing.assert_close(handoff.scaled.float(), h * norm_weight.float(), rtol=2**-7, atol=0)
    torch.testing.assert_close(handoff.sums.sum(), h.pow(2).sum(), rtol=1e-5, atol=0)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K"])
def test_a_consumer_scales_its_gemv_of_the_handed_values_by_rstd(qtype, device):
    """Its output is the plain GEMV of `scaled` times rstd (to bf16 rounding), and close to the
    GEMV of rms_norm(h) (the rounding the handoff moves); without the scaling it is far off."""
    h = _x(K, 4, scale=3.0).to(device)  # rstd near 1/3
    norm_weight = (1 + 0.1 * torch.randn(K, generator=torch.Generator().manual_seed(5))).to(torch.bfloat16)
    norm_weight = norm_weight.to(device)
    sums = h.float().pow(2).reshape(8, -1).sum(dim=1).contiguous()  # as 8 producer programs
    handoff = NormHandoff(norm_weight, EPS, (h.float() * norm_weight.float()).to(torch.bfloat16), sums)
    weight = _weight(qtype, ROWS, K, 6).to(device)
    x, fusion = handed_over(handoff)
    out = quant_gemv_fused(x, weight, None, fusion)
    rstd = torch.rsqrt(h.float().pow(2).mean() + EPS)
    plain = quant_matmul_gemv(handoff.scaled, weight).float()
    torch.testing.assert_close(out.float(), plain * rstd, rtol=2**-7, atol=1e-3 * plain.abs().max().item())
    normed = quant_matmul_gemv(rms_norm(h, norm_weight, EPS), weight).float()
    torch.testing.assert_close(out.float(), normed, rtol=0, atol=0.02 * normed.abs().max().item())
    assert (plain - normed).abs().max() > 0.5 * normed.abs().max()


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K"])
def test_a_consumers_bias_is_added_after_the_rstd_scaling(qtype, device):
    """Qwen2's q / k / v biases (GGUF files of Qwen2.5 models): out = (W scaled) * rstd + bias,
    the bias not scaled."""
    h = _x(K, 12, scale=3.0).to(device)
    sums = h.float().pow(2).reshape(4, -1).sum(dim=1).contiguous()
    handoff = NormHandoff(torch.ones(K, dtype=torch.bfloat16, device=device), EPS, h, sums)
    weight = _weight(qtype, ROWS, K, 13).to(device)
    bias = (4 * torch.randn(ROWS, generator=torch.Generator().manual_seed(14))).to(torch.bfloat16).to(device)
    x, fusion = handed_over(handoff)
    out = quant_gemv_fused(x, weight, bias, fusion).float()
    rstd = torch.rsqrt(h.float().pow(2).mean() + EPS)
    want = quant_matmul_gemv(h, weight).float() * rstd + bias.float()
    torch.testing.assert_close(out, want, rtol=2**-7, atol=1e-3 * want.abs().max().item())


def test_the_mixed_launch_takes_handed_values_as_each_part_does(device, monkeypatch):
    """The mixed qkv launch with handed-off sums: each part's columns are that part's own fused
    GEMV, bit for bit (part B's K step as the mixed kernel runs it)."""
    for table in ("Q6K_INT16X_CONFIGS", "Q6K_INT16X_SPLIT_CONFIGS"):
        monkeypatch.setattr(gguf_gemv, table, ((0, 0, (2048, 2, 4)),))
    parts = [_weight("Q4_K", ROWS, K, 7).to(device), _weight("Q6_K", 19, K, 8, split=True).to(device)]
    h = _x(K, 9, scale=3.0).to(device)
    sums = h.float().pow(2).reshape(4, -1).sum(dim=1).contiguous()
    handoff = NormHandoff(torch.ones(K, dtype=torch.bfloat16, device=device), EPS, h, sums)
    x, fusion = handed_over(handoff)
    out = mixed_gemv(x, parts, None, torch.empty((1, ROWS + 19), dtype=x.dtype, device=device), fusion=fusion)
    want = torch.cat([quant_gemv_fused(x, part, None, fusion) for part in parts], dim=1)
    assert torch.equal(out, want)
    bias = torch.randn(ROWS + 19, generator=torch.Generator().manual_seed(15)).to(torch.bfloat16).to(device)
    out = mixed_gemv(x, parts, bias, torch.empty((1, ROWS + 19), dtype=x.dtype, device=device), fusion=fusion)
    biases = (bias[:ROWS], bias[ROWS:])
    want = torch.cat([quant_gemv_fused(x, p, b, fusion) for p, b in zip(parts, biases, strict=True)], dim=1)
    assert torch.equal(out, want)


def test_the_int16x_gemvs_refuse_what_they_do_not_fold(device):
    weight = _weight("Q4_K", ROWS, K, 10).to(device)
    x = _x(K, 11).to(device)
    with pytest.raises(AssertionError, match="handed-off norms only"):
        quant_gemv_fused(x, weight, None, GemvFusion(gated=True))
    with pytest.raises(AssertionError, match="comes from a residual add"):
        quant_gemv_fused(x, weight, None, GemvFusion(handoff=NormHandoff(x[0], EPS)))
