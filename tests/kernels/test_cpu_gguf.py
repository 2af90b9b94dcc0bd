"""The CPU GGUF kernel (kernels/cpu_gguf.py) against torch's dequantize_ref: every supported type,
both code paths (AVX-512 where the host has it, and the portable one every host runs), token counts
over the kernel's 8-token passes, strided inputs and outputs, and quant_linear's CPU paths."""

from __future__ import annotations

import logging

import pytest
import torch

from kvspill.kernels import cpu_build
from kvspill.kernels import quant_linear as quant_linear_module
from kvspill.kernels.cpu_gguf import cpu_gguf_dequantize, cpu_gguf_matmul, load_kernel
from kvspill.kernels.gguf_formats import SUPPORTED_TYPES, QuantizedWeight, dequantize_ref, random_quantized
from kvspill.kernels.quant_linear import CPU_GEMV_MAX_TOKENS, quant_linear, quant_linear_path

pytestmark = pytest.mark.skipif(load_kernel() is None, reason="no C++ compiler to build the CPU kernel")

ROWS = 37  # odd: the threads' row chunks end unevenly


def _weight(qtype: str, in_features: int = 512, seed: int = 0) -> QuantizedWeight:
    return random_quantized(
        qtype, ROWS, in_features, generator=torch.Generator().manual_seed(seed), scale=0.05
    )


def _exact(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x @ dequantize_ref(W).T in float64: the product the kernel must match up to fp32 rounding."""
    return x.double() @ dequantize_ref(weight.data, weight.qtype, weight.in_features).double().T


def _assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    # fp32 sums of 512 products: relative to the largest output, a few ulps of fp32.
    err = float((actual.double() - expected).abs().max() / expected.abs().max())
    assert err < 1e-5, f"relative error {err:.2e}"


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
def test_dequantize_is_the_reference_bit_for_bit(qtype):
    weight = _weight(qtype)
    # Extreme scale fields too: a subnormal, a large and a negative fp16 d in some blocks.
    data = weight.data.clone()
    offset = 208 if qtype == "Q6_K" else 0
    block, blocks = weight.format.type_size, weight.in_features // weight.format.block_size
    for i, value in enumerate((1e-7, 6e4, -3.5)):
        at = block * (i % blocks) + offset
        data[i, at : at + 2] = torch.tensor([value]).half().view(torch.uint8)
    weight = QuantizedWeight(data, qtype, ROWS, weight.in_features)
    want = dequantize_ref(weight.data, qtype, weight.in_features)
    assert torch.equal(cpu_gguf_dequantize(weight), want)
    out = torch.full((ROWS, weight.in_features + 5), float("nan"))[:, 3 : 3 + weight.in_features]
    assert cpu_gguf_dequantize(weight, out=out) is out and torch.equal(out, want)  # strided rows


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
@pytest.mark.parametrize("portable", [False, True])
@pytest.mark.parametrize("tokens", [1, 3, 8, 11])  # 11: a full 8-token pass, then 3
def test_matmul_equals_the_reference(qtype, portable, tokens):
    weight = _weight(qtype, seed=tokens)
    x = torch.randn(tokens, weight.in_features, generator=torch.Generator().manual_seed(1))
    _assert_close(cpu_gguf_matmul(x, weight, portable=portable), _exact(x, weight))


def test_matmul_reads_strided_rows_and_writes_strided_columns():
    weight = _weight("Q4_K", in_features=768)
    wide = torch.randn(5, 800)
    x = wide[:, 16 : 16 + 768]  # rows 800 apart
    out = torch.full((5, ROWS + 9), float("nan"))
    columns = out[:, 4 : 4 + ROWS]
    assert cpu_gguf_matmul(x, weight, out=columns) is columns
    _assert_close(columns, _exact(x, weight))
    assert out[:, :4].isnan().all() and out[:, 4 + ROWS :].isnan().all()  # nothing outside written
    # A row view of a weight (a fused projection's part) reads its own rows only.
    part = weight.rows(10, 30)
    _assert_close(cpu_gguf_matmul(x.contiguous(), part), _exact(x, weight)[:, 10:30])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, CPU_GEMV_MAX_TOKENS, CPU_GEMV_MAX_TOKENS + 1, 70])
def test_quant_linear_takes_the_cpu_kernel(dtype, tokens, monkeypatch):
    weight = _weight("Q6_K", seed=5)
    x = torch.randn(tokens, weight.in_features, generator=torch.Generator().manual_seed(2)).to(dtype)
    bias = torch.randn(ROWS).to(dtype)
    want_path = "cpu_gemv" if tokens <= CPU_GEMV_MAX_TOKENS else "cpu_dequant_matmul"
    assert quant_linear_path(x, weight) == want_path
    # Small slices: the dequantize-then-matmul path writes each slice's columns of the output.
    monkeypatch.setattr(quant_linear_module, "_SLICE_ROW_MULTIPLE", 1)
    monkeypatch.setattr(quant_linear_module, "CPU_DEQUANT_SLICE_BYTES", 8 * weight.in_features * 4)
    y = quant_linear(x, weight, bias)
    assert y.dtype == dtype and y.shape == (tokens, ROWS)
    expected = _exact(x, weight) + bias.double()
    if dtype == torch.float32:
        _assert_close(y, expected)
    else:  # the fp32 result rounded once to x's dtype: within one of its ulps (x was already in it)
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(y.double(), expected, rtol=eps, atol=float(expected.abs().max()) * 1e-5)


def test_quant_linear_gated_on_the_cpu_kernel():
    weight = _weight("Q4_1", seed=6)
    x = torch.randn(3, 2 * weight.in_features)
    gate, up = x.chunk(2, dim=-1)
    y = quant_linear(x, weight, gated=True)
    _assert_close(y, _exact(torch.nn.functional.silu(gate) * up, weight))


def test_no_compiler_falls_back_with_one_clear_warning(monkeypatch, caplog):
    from kvspill.kernels import cpu_gguf

    monkeypatch.setattr(cpu_build.shutil, "which", lambda name: None)
    cpu_gguf.load_kernel.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="kvspill.kernels.cpu_gguf"):
            assert cpu_gguf.load_kernel() is None
            assert cpu_gguf.load_kernel() is None
            weight = _weight("Q8_0")
            assert quant_linear_path(torch.randn(1, weight.in_features), weight) == "reference"
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1 and "install g++" in warnings[0] and "GGUF" in warnings[0]
    finally:
        cpu_gguf.load_kernel.cache_clear()
