"""The fp8 decode GEMV (kernels/fp8_gemv.py) under the Triton interpreter, against its reference."""

from __future__ import annotations

import itertools

import pytest
import torch

from kvspill.kernels.fp8_gemv import GemvConfig, dense_gemv, fp8_gemv, fp8_gemv_ref, gemv_config
from kvspill.kernels.fp8_linear import fp8_linear, fp8_linear_ref, quantize_weight_fp8

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter runs: CPU tensors only")


def _operands(num_tokens, n, k, dtype, with_bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    w_fp8, w_scale = quantize_weight_fp8(torch.randn(n, k, generator=g) * 0.05)
    x = torch.randn(num_tokens, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype) if with_bias else None
    return x, w_fp8, w_scale, bias


# Ragged N and K (masked tails) and exact multiples, one token (elementwise) and several (tl.dot).
@pytest.mark.parametrize(
    ("num_tokens", "n", "k", "config"),
    [
        (1, 40, 96, GemvConfig(8, 32, 1, 1)),
        (1, 64, 128, GemvConfig(16, 64, 1, 1)),
        (3, 50, 160, GemvConfig(16, 32, 1, 1)),
        (16, 32, 64, GemvConfig(32, 64, 1, 1)),
    ],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemv_matches_the_reference(num_tokens, n, k, config, dtype, with_bias):
    x, w_fp8, w_scale, bias = _operands(num_tokens, n, k, dtype, with_bias)
    out = fp8_gemv(x, w_fp8, w_scale, bias, config=config)
    assert out.shape == (num_tokens, n) and out.dtype == dtype
    # Same exact products in fp32; only the summation order and the output rounding differ.
    torch.testing.assert_close(out, fp8_gemv_ref(x, w_fp8, w_scale, bias), rtol=1e-2, atol=2e-2)


def test_the_gemv_path_of_fp8_linear_is_weight_only():
    """Forced onto the CPU, the "gemv" path agrees with the weight-only reference (the CPU path)
    far more closely than the activation-quantizing GEMM does (2.6% RMS there)."""
    x, w_fp8, w_scale, bias = _operands(2, 48, 64, torch.bfloat16, True)
    x = x.reshape(2, 1, 64)  # leading dims are kept
    out = fp8_linear(x, w_fp8, w_scale, bias, path="gemv")
    ref = fp8_linear_ref(x, w_fp8, w_scale, bias)
    assert out.shape == (2, 1, 48)
    assert ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 0.01


def test_configs_fit_the_kernel_variants():
    for num_tokens, weight_bytes in itertools.product((1, 2, 16), (1, 2)):
        cfg = gemv_config(num_tokens, 4096, 4096, weight_bytes)
        assert num_tokens == 1 or cfg.block_n >= 16  # tl.dot's smallest N
    # fp8's one-token tiles (H200 sweep): 16 rows but for long rows, K chunks by the row count
    assert gemv_config(1, 28672, 4096, 1) == GemvConfig(16, 256, 4, 3)
    assert gemv_config(1, 4096, 14336, 1).block_n == 8


@pytest.mark.parametrize(("n", "k"), [(24, 1536), (40, 2048), (16392, 256)])
def test_fp8_default_tiles_cover_ragged_shapes(n, k):
    """gemv_config's fp8 picks (masked K chunks where K is not a multiple of 1024) stay exact."""
    x, w_fp8, w_scale, bias = _operands(1, n, k, torch.bfloat16, True)
    torch.testing.assert_close(
        fp8_gemv(x, w_fp8, w_scale, bias), fp8_gemv_ref(x, w_fp8, w_scale, bias), rtol=1e-2, atol=2e-2
    )


@pytest.mark.parametrize(("n", "k"), [(24, 1000), (40, 4096), (20, 5120), (4100, 256)])
def test_dense_default_tiles_cover_each_rule_and_ragged_shapes(n, k):
    """gemv_config's 16-bit one-token tiles (short rows: 8 x 512; N, K <= 4096: 4 x 2048; else
    8 x 1024 / 512), masked where K or N is not a multiple of the tile, stay exact."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, k, generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    want = (x.float() @ w.float().t()).to(torch.bfloat16)
    torch.testing.assert_close(dense_gemv(x, w), want, rtol=1e-2, atol=1e-2)


def test_dense_one_token_tiles_by_shape():
    assert gemv_config(1, 2048, 2048) == GemvConfig(8, 512, 4, 4)  # a 1B's o
    assert gemv_config(1, 4096, 4096) == GemvConfig(4, 2048, 4, 3)  # an 8B's o
    assert gemv_config(1, 28672, 4096) == GemvConfig(8, 1024, 4, 3)  # an 8B's gate_up
    assert gemv_config(1, 4096, 14336) == GemvConfig(8, 1024, 4, 3)  # an 8B's down


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("n", "k", "config"), [(40, 96, GemvConfig(8, 32, 1, 1)), (24, 64, None)])
def test_dense_gemv_matches_a_float32_matmul(dtype, n, k, config):
    """The same kernel on weights in x's dtype (the bf16 / fp16 decode path of model/layers.py's
    dense_linear): no scale, fp32 sums."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    out = dense_gemv(x, w, bias, config=config)
    want = (x.float() @ w.float().t() + bias.float()).to(dtype)
    assert out.shape == (1, n) and out.dtype == dtype
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
    with pytest.raises(AssertionError, match="must be x's dtype"):
        dense_gemv(x, w.float())


@pytest.mark.parametrize(("n", "k", "config"), [(40, 96, GemvConfig(8, 32, 1, 1)), (64, 128, None)])
@pytest.mark.parametrize("weights", ["fp8", "bf16", "fp16"])
def test_a_fused_token_is_the_separate_kernels_bit_for_bit(n, k, config, weights):
    """GemvFusion folds the RMSNorm before, the SiLU before, or the residual add after the GEMV:
    the same bits as kernels/fused_ops' kernels around the plain GEMV (ragged and even K)."""
    from kvspill.kernels.fp8_gemv import GemvFusion
    from kvspill.kernels.fused_ops import rms_norm, silu_and_mul

    dtype = torch.float16 if weights == "fp16" else torch.bfloat16
    g = torch.Generator().manual_seed(2)
    x, w_fp8, w_scale, bias = _operands(1, n, k, dtype, with_bias=True)
    if weights == "fp8":
        gemv = lambda x, fusion=None: fp8_gemv(x, w_fp8, w_scale, bias, config, fusion)  # noqa: E731
    else:
        w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
        gemv = lambda x, fusion=None: dense_gemv(x, w, bias, config, fusion)  # noqa: E731
    norm_weight = (1 + 0.1 * torch.randn(k, generator=g)).to(dtype)
    normed = gemv(x, GemvFusion(norm_weight=norm_weight, eps=1e-5))
    assert torch.equal(normed, gemv(rms_norm(x, norm_weight, 1e-5)))
    gate_up = torch.randn(1, 2 * k, generator=g).to(dtype)
    assert torch.equal(gemv(gate_up, GemvFusion(gated=True)), gemv(silu_and_mul(gate_up)))
    residual = torch.randn(1, n, generator=g).to(dtype)
    stream = residual.clone()
    assert gemv(x, GemvFusion(residual=stream)) is stream
    _, want = rms_norm(gemv(x), torch.ones(n, dtype=dtype), 1e-5, residual)
    assert torch.equal(stream, want)


@pytest.mark.parametrize(("n", "k", "config"), [(40, 96, GemvConfig(8, 32, 1, 1)), (64, 48, None)])
@pytest.mark.parametrize("weights", ["fp8", "bf16"])
def test_a_norm_handed_off_is_the_rms_norm_up_to_one_rounding(n, k, config, weights):
    """A producer (residual add) hands the next RMSNorm to a consumer: the residual stream is the
    separate kernels' bit for bit; the consumer's output is the GEMV of rms_norm(h) up to the
    rounding the handoff moves (h * rstd to bf16 before the weight), and scaled / sums are
    h * weight and sum(h^2) (ragged N: the tail program's padded rows add nothing)."""
    from kvspill.kernels.fp8_gemv import GemvFusion
    from kvspill.kernels.fused_ops import rms_norm
    from kvspill.kernels.norm_handoff import NormHandoff

    g = torch.Generator().manual_seed(3)
    x, w_fp8, w_scale, bias = _operands(1, n, k, torch.bfloat16, with_bias=True)
    w_next = (torch.randn(24, n, generator=g) * 0.05).to(torch.bfloat16)  # the consumer, K = n
    if weights == "fp8":
        produce = lambda fusion=None: fp8_gemv(x, w_fp8, w_scale, bias, config, fusion)  # noqa: E731
    else:
        w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
        produce = lambda fusion=None: dense_gemv(x, w, bias, config, fusion)  # noqa: E731
    norm_weight = (1 + 0.1 * torch.randn(n, generator=g)).to(torch.bfloat16)
    residual = (3 * torch.randn(1, n, generator=g)).to(torch.bfloat16)  # rstd near 1/3
    stream = residual.clone()
    handoff = NormHandoff(norm_weight, 1e-5)
    assert produce(GemvFusion(residual=stream, handoff=handoff)) is stream
    normed, want_stream = rms_norm(produce(), norm_weight, 1e-5, residual)
    assert torch.equal(stream, want_stream)
    h = stream.float()
    # one bf16 step apart at most (the interpreter rounds to bf16 toward zero, torch to nearest)
    torch.testing.assert_close(handoff.scaled.float(), h * norm_weight.float(), rtol=2**-7, atol=0)
    torch.testing.assert_close(handoff.sums.sum(), h.pow(2).sum(), rtol=1e-5, atol=0)
    out = dense_gemv(handoff.scaled, w_next, None, None, GemvFusion(sums=handoff.sums, eps=1e-5))
    want = normed.float() @ w_next.float().t()
    torch.testing.assert_close(out.float(), want, rtol=0, atol=2e-2 * want.abs().max().item())
    wrong = dense_gemv(handoff.scaled, w_next)  # without the rstd: a check that can fail
    assert (wrong.float() - want).abs().max() > 0.1 * want.abs().max()


def test_a_fusion_takes_one_token_and_matching_operands():
    from kvspill.kernels.fp8_gemv import GemvFusion

    x, w_fp8, w_scale, _ = _operands(2, 16, 32, torch.bfloat16, with_bias=False)
    with pytest.raises(AssertionError, match="one token"):
        fp8_gemv(x, w_fp8, w_scale, fusion=GemvFusion(gated=True))
    with pytest.raises(AssertionError, match="exclude each other"):
        fp8_gemv(x[:1], w_fp8, w_scale, fusion=GemvFusion(norm_weight=x[0], gated=True))
    with pytest.raises(AssertionError, match="residual must be"):
        fp8_gemv(x[:1], w_fp8, w_scale, fusion=GemvFusion(residual=torch.zeros(1, 8, dtype=torch.bfloat16)))
