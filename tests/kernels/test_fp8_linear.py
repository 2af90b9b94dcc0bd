"""fp8 weights: quantization bounds, the references, the per-token Triton kernel, the CUDA path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kvspill.errors import InvalidParameterError
from kvspill.kernels.fp8_gemv import MAX_GEMV_TOKENS, fp8_gemv_ref
from kvspill.kernels.fp8_linear import (
    FP8_DTYPE,
    FP8_MAX,
    check_fp8_supported,
    dequantize_fp8,
    fp8_linear,
    fp8_linear_path,
    fp8_linear_ref,
    fp8_scaled_mm_ref,
    quantize_rows_fp8,
    quantize_rows_fp8_ref,
    quantize_weight_fp8,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SMALLEST_NORMAL = 2.0**-6  # of float8_e4m3fn; below it the grid is a fixed 2^-9


def _randn(*shape, dtype=torch.float32, device="cpu", seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


def _all_e4m3_values() -> torch.Tensor:
    """Every finite non-negative float8_e4m3fn value, ascending, as float32."""
    values = torch.arange(256, dtype=torch.uint8).view(FP8_DTYPE).float()
    return values[torch.isfinite(values) & (values >= 0)].unique()


@pytest.mark.parametrize("dtype", DTYPES)
def test_quantize_round_trip_is_within_half_an_e4m3_step(dtype):
    # Rows spanning 1e-3 .. 1e3 in magnitude, values spanning a few binades within each row.
    w = (_randn(48, 96) * torch.logspace(-3, 3, 48)[:, None]).to(dtype)
    q, scale = quantize_weight_fp8(w)
    assert q.dtype == FP8_DTYPE and q.shape == w.shape
    assert scale.dtype == torch.float32 and scale.shape == (48,)
    back = dequantize_fp8(q, scale, torch.float32)
    wf = w.float()
    # 3 mantissa bits: half a step is 2^-4 relative; in the subnormal range 2^-10 of the scale.
    bound = torch.maximum(wf.abs() * 2.0**-4, scale[:, None] * 2.0**-10) * (1 + 1e-6)
    assert ((back - wf).abs() <= bound).all()
    # Each row's absmax lands on 448 exactly, so it comes back (nearly) exactly.
    assert (q.float().abs().amax(dim=1) == FP8_MAX).all()
    torch.testing.assert_close(back.abs().amax(dim=1), wf.abs().amax(dim=1), rtol=1e-6, atol=0)


def test_a_zero_row_gets_a_positive_scale_and_zero_values():
    w = _randn(4, 32)
    w[1] = 0.0
    q, scale = quantize_weight_fp8(w)
    assert (scale > 0).all() and torch.isfinite(scale).all()
    assert (q[1].float() == 0).all()
    assert torch.isfinite(dequantize_fp8(q, scale, torch.float32)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_linear_is_a_matmul_with_the_dequantized_weight(dtype):
    w = _randn(40, 64, seed=1)
    q, scale = quantize_weight_fp8(w)
    x = _randn(5, 64, dtype=dtype, seed=2)
    bias = _randn(40, dtype=dtype, seed=3)
    w_deq = (q.float() * scale[:, None]).to(dtype)
    torch.testing.assert_close(fp8_linear_ref(x, q, scale, bias), F.linear(x, w_deq, bias), rtol=0, atol=0)
    # And close to the unquantized layer: a 2^-4 weight error averages down over 64 products.
    exact = F.linear(x.double(), w.double(), bias.double())
    err = (fp8_linear_ref(x, q, scale, bias).double() - exact).norm() / exact.norm()
    assert err < 0.05, err


def test_scaled_mm_reference_matches_float64():
    x_fp8, x_scale = quantize_rows_fp8_ref(_randn(6, 32))
    w_fp8, w_scale = quantize_weight_fp8(_randn(16, 32, seed=1))
    bias = _randn(16, seed=2)
    expected = (x_fp8.double() * x_scale.double()) @ (w_fp8.double() * w_scale.double()[:, None]).t()
    out = fp8_scaled_mm_ref(x_fp8, x_scale, w_fp8, w_scale, bias, torch.float32)
    torch.testing.assert_close(out.double(), expected + bias.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_tokens, k", [(1, 16), (5, 100), (3, 4096), (2, 5000)])
def test_row_quant_kernel_equals_reference_bit_for_bit(dtype, num_tokens, k, device):
    x = (_randn(num_tokens, k, seed=k) * torch.logspace(-2, 2, num_tokens)[:, None]).to(dtype)
    if num_tokens > 2:
        x[1] = 0.0  # a padding token
    x = x.to(device)
    q, scale = quantize_rows_fp8(x)
    q_ref, scale_ref = quantize_rows_fp8_ref(x)
    assert scale.shape == (num_tokens, 1) and scale.is_contiguous()
    _assert_same_quantization(q, scale, q_ref, scale_ref)


def test_row_quant_kernel_rounds_every_midpoint_like_torch(device):
    """Ties go to even, and a round-up across a power of two carries into the exponent: every
    e4m3 value, every midpoint between neighbours and one fp32 ulp either side, both signs."""
    grid = _all_e4m3_values()
    mid = (grid[1:] + grid[:-1]) / 2
    probes = torch.cat([grid, mid, torch.nextafter(mid, mid + 1), torch.nextafter(mid, mid - 1)])
    probes = torch.cat([probes, -probes]).clamp(-FP8_MAX, FP8_MAX)
    x = probes[None, :].to(device)  # absmax 448: the scale is exactly 1
    q, scale = quantize_rows_fp8(x)
    q_ref, _ = quantize_rows_fp8_ref(x)
    assert scale.item() == 1.0
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    assert torch.equal(q_ref.float(), probes[None, :].to(device).to(FP8_DTYPE).float())


def test_row_quant_kernel_reads_strided_rows(device):
    x = _randn(4, 80, dtype=torch.bfloat16, device=device)[:, 8:72]  # row stride 80, K 64
    q, scale = quantize_rows_fp8(x)
    q_ref, scale_ref = quantize_rows_fp8_ref(x)
    _assert_same_quantization(q, scale, q_ref, scale_ref)


def _assert_same_quantization(q, scale, q_ref, scale_ref) -> None:
    """Bit for bit under the interpreter. On a GPU (H100, 2026-11-26) a scale may differ from
    torch's by an ulp, and then an element at a rounding midpoint by one fp8 step."""
    if q.device.type == "cpu":
        assert torch.equal(scale, scale_ref)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
        return
    torch.testing.assert_close(scale, scale_ref, rtol=3e-7, atol=0)
    differ = (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()
    assert differ <= 1e-3, differ
    torch.testing.assert_close(q.float(), q_ref.float(), rtol=0.13, atol=2**-9)  # one e4m3 step


def test_the_cpu_takes_the_reference_path():
    w, scale = quantize_weight_fp8(_randn(32, 64))
    x = _randn(3, 64, dtype=torch.bfloat16)
    assert fp8_linear_path(x, w) == "reference"
    torch.testing.assert_close(fp8_linear(x, w, scale), fp8_linear_ref(x, w, scale), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="runs the CUDA path's Triton kernel on CPU tensors: interpreter only"
)
def test_scaled_mm_path_on_the_cpu_matches_the_emulation(dtype, with_bias):
    """The CUDA path's calls (row-wise for bf16, unit tensor-wise + scaling otherwise), run through
    torch's CPU `_scaled_mm`: checks operand layout, scale shapes, bias and the leading dims."""
    w_fp8, w_scale = quantize_weight_fp8(_randn(48, 64) * 0.02)
    x = _randn(2, 3, 64, dtype=dtype, seed=1)
    bias = _randn(48, dtype=dtype, seed=2) if with_bias else None
    out = fp8_linear(x, w_fp8, w_scale, bias, path="scaled_mm")
    assert out.dtype == dtype and out.shape == (2, 3, 48)
    x_fp8, x_scale = quantize_rows_fp8_ref(x.reshape(6, 64))
    emulated = fp8_scaled_mm_ref(x_fp8, x_scale, w_fp8, w_scale, bias, torch.float32).reshape(2, 3, 48)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(out.float(), emulated, rtol=tol, atol=tol)


def test_capability_check_names_the_card_and_the_way_out(monkeypatch):
    check_fp8_supported(torch.device("cpu"))  # the reference path runs anywhere
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(InvalidParameterError, match=r"compute capability 8\.9\+.*this GPU is 8\.0") as e:
        check_fp8_supported(torch.device("cuda", 0))
    assert e.value.param == "quantization"
    assert "--quantization none or a GGUF file" in str(e.value)
    for capability in [(8, 9), (9, 0), (10, 0)]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        check_fp8_supported(torch.device("cuda", 0))


def _fp8_cuda_available() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.gpu
@pytest.mark.skipif(not _fp8_cuda_available(), reason="needs a CUDA GPU of compute capability 8.9+")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_tokens", [1, 5, 16, 33, 300])
@pytest.mark.parametrize("with_bias", [False, True])
def test_cuda_path_matches_the_references(dtype, num_tokens, with_bias):
    k, n = 4096, 1536
    w_fp8, w_scale = quantize_weight_fp8(_randn(n, k, device="cuda", seed=1) * 0.02)
    x = _randn(num_tokens, k, dtype=dtype, device="cuda", seed=2)
    bias = _randn(n, dtype=dtype, device="cuda", seed=3) if with_bias else None
    gemv = num_tokens <= MAX_GEMV_TOKENS
    assert fp8_linear_path(x, w_fp8) == ("gemv" if gemv else "scaled_mm")
    out = fp8_linear(x, w_fp8, w_scale, bias)
    assert out.dtype == dtype and out.shape == (num_tokens, n)
    if gemv:  # weight-only: fp32 summation order and output rounding only
        torch.testing.assert_close(out, fp8_gemv_ref(x, w_fp8, w_scale, bias), rtol=1e-2, atol=1e-2)
        return
    # Against the same quantized operands: fp32 summation order and output rounding only.
    emulated = fp8_scaled_mm_ref(*quantize_rows_fp8(x), w_fp8, w_scale, bias, torch.float32)
    torch.testing.assert_close(out.float(), emulated, rtol=2e-2, atol=2e-2)
    # Against the weight-only reference (the CPU path): the activation rounding on top, 2.6% RMS
    # relative for these shapes in the CPU emulation (fp8_scaled_mm_ref vs fp8_linear_ref).
    ref = fp8_linear_ref(x, w_fp8, w_scale, bias).float()
    assert (out.float() - ref).norm() / ref.norm() < 0.04


@pytest.mark.gpu
@pytest.mark.skipif(not _fp8_cuda_available(), reason="needs a CUDA GPU of compute capability 8.9+")
@pytest.mark.parametrize("num_tokens", [1, 8, 64])  # both GEMV variants and the GEMM
def test_cuda_path_is_graph_capturable(num_tokens):
    w_fp8, w_scale = quantize_weight_fp8(_randn(512, 256, device="cuda") * 0.02)
    x = _randn(num_tokens, 256, dtype=torch.bfloat16, device="cuda", seed=1)
    fp8_linear(x, w_fp8, w_scale)  # warm up (Triton compile, cuBLAS handles) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8_linear(x, w_fp8, w_scale)
    x.copy_(_randn(num_tokens, 256, dtype=torch.bfloat16, device="cuda", seed=2))
    graph.replay()
    torch.testing.assert_close(out, fp8_linear(x, w_fp8, w_scale), rtol=0, atol=0)
