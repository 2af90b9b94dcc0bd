"""The int16-x quality bench's linear: the kernel's arithmetic for Q4_K, exact when x is not rounded."""

from __future__ import annotations

import pytest
import torch

from kvspill.bench import int16x_quality
from kvspill.kernels.gguf_formats import dequantize_ref, random_quantized
from kvspill.kernels.gguf_gemv_int16x import q4k_int16x_ref


def _case(qtype: str, tokens: int = 1):
    gen = torch.Generator().manual_seed(7)
    weight = random_quantized(qtype, 11, 512, gen)
    x = torch.randn((tokens, 512), generator=gen) * 3 + 0.5
    return weight, x


def test_q4k_linear_is_the_kernels_reference():
    weight, x = _case("Q4_K")
    want = q4k_int16x_ref(x, weight.data, weight.in_features)
    got = int16x_quality.int16x_linear(x, weight)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    exact = x @ dequantize_ref(weight.data, "Q4_K", weight.in_features).t()
    assert float((got - exact).abs().max()) > 1e-6 * float(exact.abs().max())  # x was rounded


def test_q4_1_linear_rounds_per_group_as_the_q6k_kernel_does():
    """Per 4 values (Q6_K's kernel): the Q4_1 weight's quants times x rounded per 4, its m on exact
    sums; a finer group rounds less than the Q4_K kernel's 16."""
    weight, x = _case("Q4_1")
    w = dequantize_ref(weight.data, "Q4_1", weight.in_features)
    exact = x @ w.t()
    got4 = int16x_quality.int16x_linear(x, weight, group=4)
    xq, dx = int16x_quality.int16_x_blocks(x, 14, 4)
    m = int16x_quality.block_offsets(weight.data, "Q4_1", weight.in_features).repeat_interleave(32, dim=1)
    want = (xq * dx[..., None]).flatten(-2) @ (w - m).t() + x @ m.t()
    torch.testing.assert_close(got4, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    got16 = int16x_quality.int16x_linear(x, weight)
    assert float((got4 - exact).abs().max()) < float((got16 - exact).abs().max())


@pytest.mark.parametrize("qtype", ["Q4_1", "Q4_K", "Q6_K", "Q8_0"])
def test_linear_without_rounding_is_exact(qtype, monkeypatch):
    # The split into scaled quants and block constants adds back up to x @ W.T.
    def unrounded(x, bits, group):
        xf = x.float().reshape(*x.shape[:-1], -1, group)
        return xf, torch.ones(xf.shape[:-1])

    monkeypatch.setattr(int16x_quality, "int16_x_blocks", unrounded)
    weight, x = _case(qtype, tokens=3)
    exact = x @ dequantize_ref(weight.data, qtype, weight.in_features).t()
    got = int16x_quality.int16x_linear(x, weight)
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-5 * float(exact.abs().max()))
