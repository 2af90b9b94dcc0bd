"""Fused dequantize-GEMV vs dequantize_ref-then-matmul, and the quant_linear dispatcher's paths."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels import gguf_gemv, gguf_mma_configs
from kvspill.kernels import quant_linear as quant_linear_module
from kvspill.kernels.gguf_formats import FORMATS, SUPPORTED_TYPES, dequantize_ref, random_quantized
from kvspill.kernels.gguf_gemv import quant_matmul_gemv
from kvspill.kernels.quant_linear import quant_linear, quant_linear_path

ROWS = 19  # not a multiple of the GEMV's 16-row tile


def _in_features(qtype: str) -> int:
    # 11 legacy blocks: a partial chunk of 8 blocks; 3 K-quant super-blocks.
    return 11 * 32 if FORMATS[qtype].block_size == 32 else 3 * 256


def _case(qtype: str, num_tokens: int, dtype: torch.dtype, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    in_features = _in_features(qtype)
    weight = random_quantized(qtype, ROWS, in_features, gen)
    x = torch.randn((num_tokens, in_features), generator=gen).to(dtype)
    bias = torch.randn((ROWS,), generator=gen).to(dtype)
    w_ref = dequantize_ref(weight.data, qtype, in_features).double()
    return weight.to(device), x.to(device), bias.to(device), w_ref


def _expected(x: torch.Tensor, w_ref: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = x.cpu().double() @ w_ref.T
    return out if bias is None else out + bias.cpu().double()


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, rel: float) -> None:
    # Relative to the largest output: the dot products cancel, so per-element rtol is meaningless.
    scale = float(expected.abs().max())
    torch.testing.assert_close(actual.cpu().double(), expected, rtol=0, atol=rel * scale)


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
@pytest.mark.parametrize("num_tokens", [1, 3, 16])
def test_gemv_fp32_matches_reference(qtype, num_tokens, device):
    weight, x, bias, w_ref = _case(qtype, num_tokens, torch.float32, device)
    use_bias = num_tokens == 3
    out = quant_matmul_gemv(x, weight, bias if use_bias else None)
    assert out.shape == (num_tokens, ROWS) and out.dtype == torch.float32
    _assert_close(out, _expected(x, w_ref, bias if use_bias else None), rel=1e-5)


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
def test_gemv_several_chunks(qtype, device, monkeypatch):
    # Chunks of 256 weights: the K loop runs 2 (legacy: 8 + 3 blocks) or 3 times.
    monkeypatch.setitem(gguf_gemv.FMA_CONFIG, qtype, (256, 16, 4))
    weight, x, bias, w_ref = _case(qtype, 1, torch.float32, device, seed=2)
    _assert_close(quant_matmul_gemv(x, weight, bias), _expected(x, w_ref, bias), rel=1e-5)


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_tokens", [1, 2])
def test_gemv_half_activations(qtype, dtype, num_tokens, device):
    weight, x, bias, w_ref = _case(qtype, num_tokens, dtype, device, seed=1)
    out = quant_matmul_gemv(x, weight, bias)
    assert out.dtype == dtype
    # One token: only the output's rounding differs (fp32 math). Two: the dot kernel also rounds
    # the dequantized weight to x's dtype.
    _assert_close(out, _expected(x, w_ref, bias), rel=1e-2 if dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chunk", [512, 2048])
def test_q4k_one_token_kernel_offset_sums(dtype, chunk, device, monkeypatch):
    # The one-token Q4_K kernel sums (2**E + q) * x and moves 2**E into the min term: with x far
    # from zero mean (large sums of x), written to an fp32 output, it stays within 1e-4 of the largest
    # output. 9 super-blocks: the K loop's last step reads past the end (chunk 2048: 8 + 1).
    monkeypatch.setattr(gguf_gemv, "Q4K_ONE_TOKEN_CONFIG", (chunk, 4, 1))
    monkeypatch.setenv(
        "KVSPILL_INT16_X", "0"
    )  # the float lanes (tests/kernels/test_gguf_int16x.py: the other)
    gen = torch.Generator().manual_seed(3)
    weight = random_quantized("Q4_K", ROWS, 9 * 256, gen)
    x = (torch.randn((1, 9 * 256), generator=gen) + 3.0).to(dtype)
    bias = torch.randn((ROWS,), generator=gen).to(dtype)
    w_ref = dequantize_ref(weight.data, "Q4_K", 9 * 256).double()
    weight, x, bias = weight.to(device), x.to(device), bias.to(device)
    assert gguf_gemv._one_token_q4k(x, weight)
    assert not gguf_gemv._one_token_q4k(x.float(), weight)  # fp32 x: the exact kernel
    out = torch.empty((1, ROWS), dtype=torch.float32, device=device)
    gguf_gemv._launch_lane_kernel(x, weight, bias, out, gguf_gemv.FMA_CONFIG["Q4_K"])
    _assert_close(out, _expected(x, w_ref, bias), rel=1e-4)


def test_gemv_rejects_too_many_tokens(device):
    weight, x, _, _ = _case("Q8_0", 17, torch.float32, device)
    with pytest.raises(AssertionError, match="<= 16 tokens"):
        quant_matmul_gemv(x, weight)


def _spy_paths(monkeypatch) -> list[str]:
    """Records which kernels quant_linear calls."""
    calls: list[str] = []
    for name in ("quant_matmul_gemv", "dequantize", "dequantize_ref"):
        real = getattr(quant_linear_module, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(quant_linear_module, name, spy)
    return calls


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_0"])
def test_quant_linear_gemv_path(qtype, device, monkeypatch):
    weight, x, bias, w_ref = _case(qtype, 4, torch.float32, device)
    calls = _spy_paths(monkeypatch)
    monkeypatch.setattr(gguf_mma_configs, "MMA_CONFIGS", {})  # counts with a tensor-core pick take "mma"
    x3 = x.reshape(2, 2, -1)  # leading dims are flattened and restored
    assert quant_linear_path(x3, weight) == ("gemv" if device == "cuda" else "cpu_gemv")
    out = quant_linear(x3, weight, bias, path=None if device == "cuda" else "gemv")
    assert calls == ["quant_matmul_gemv"] and out.shape == (2, 2, ROWS)
    _assert_close(out.reshape(4, ROWS), _expected(x, w_ref, bias), rel=1e-5)


@pytest.mark.parametrize("qtype", ["Q4_1", "Q6_K"])
def test_quant_linear_dequant_matmul_path(qtype, device, monkeypatch):
    weight, x, bias, w_ref = _case(qtype, 20, torch.float32, device)
    calls = _spy_paths(monkeypatch)
    monkeypatch.setattr(gguf_mma_configs, "MMA_CONFIGS", {})
    assert quant_linear_path(x, weight) == ("dequant_matmul" if device == "cuda" else "cpu_gemv")
    scratch = torch.empty(ROWS * x.shape[1] + 7, device=device)
    path = None if device == "cuda" else "dequant_matmul"
    out = quant_linear(x, weight, bias, scratch=scratch, path=path)
    assert calls == ["dequantize"] and out.shape == (20, ROWS)
    # The dense layer went through the scratch buffer.
    torch.testing.assert_close(scratch[: ROWS * x.shape[1]].view(ROWS, -1).cpu().double(), w_ref)
    _assert_close(out, _expected(x, w_ref, bias), rel=1e-5)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])
def test_quant_linear_dequantizes_a_large_weight_in_slices(qtype, device, monkeypatch):
    # A weight larger than DEQUANT_SLICE_BYTES dense is dequantized 8 rows at a time into one
    # buffer and each slice multiplied into its output columns: same product, a slice of transient.
    import kvspill.kernels.quant_linear as ql

    weight, x, bias, w_ref = _case(qtype, 20, torch.float32, device, seed=3)
    monkeypatch.setattr(ql, "_SLICE_ROW_MULTIPLE", 1)
    monkeypatch.setattr(ql, "DEQUANT_SLICE_BYTES", 8 * weight.in_features * 4)
    assert ql.dequant_slice_rows(ROWS, weight.in_features, torch.float32) == 8
    calls = _spy_paths(monkeypatch)
    scratch = torch.empty(8 * weight.in_features, device=device)
    out = quant_linear(x, weight, bias, scratch=scratch, path="dequant_matmul")
    assert calls == ["dequantize"] * 3 and out.shape == (20, ROWS)  # rows 0-7, 8-15, 16-18
    torch.testing.assert_close(scratch[: 3 * weight.in_features].view(3, -1).cpu().double(), w_ref[16:])
    _assert_close(out, _expected(x, w_ref, bias), rel=1e-5)


def test_quant_linear_reference_path_on_cpu(monkeypatch):
    # A CPU tensor without the C++ kernel (no compiler) takes the torch path, interpreter or not:
    # no Triton launch.
    weight, x, bias, w_ref = _case("Q4_K", 2, torch.float32, "cpu")
    calls = _spy_paths(monkeypatch)
    monkeypatch.setattr(quant_linear_module, "load_cpu_kernel", lambda: None)
    assert quant_linear_path(x, weight) == "reference"
    out = quant_linear(x, weight, bias)
    assert calls == ["dequantize_ref"]
    _assert_close(out, _expected(x, w_ref, bias), rel=1e-5)
    bf16 = quant_linear(x.bfloat16(), weight, bias.bfloat16())
    assert bf16.dtype == torch.bfloat16
    _assert_close(bf16, _expected(x.bfloat16(), w_ref, bias.bfloat16()), rel=2e-2)


@pytest.mark.parametrize(
    ("path", "qtype", "tokens", "dtype"),
    [
        ("gemv", "Q4_K", 1, torch.bfloat16),  # the one-token int16-x kernel
        ("gemv", "Q6_K", 2, torch.float32),  # the multi-token lanes (strided rows)
        ("gemv", "Q8_0", 3, torch.float32),  # the dot kernel
        ("mma", "Q4_K", 5, torch.float32),
        ("mma", "Q6_K", 9, torch.float32),
        ("dequant_matmul", "Q4_K", 20, torch.float32),
        ("reference", "Q6_K", 3, torch.float32),
    ],
)
def test_each_path_writes_its_columns_of_a_wider_output(path, qtype, tokens, dtype, device) -> None:
    """quant_linear(out=a column slice): what a mixed QuantLinear's parts do instead of a
    concatenation; the Triton paths run under the interpreter on the CPU."""
    weight = random_quantized(qtype, 48, 256, torch.Generator().manual_seed(3)).to(device)
    x = torch.randn(tokens, 256, generator=torch.Generator().manual_seed(6)).to(dtype).to(device)
    alone = quant_linear(x, weight, path=path)
    wide = torch.full((tokens, 100), float("nan"), dtype=dtype, device=device)
    got = quant_linear(x, weight, path=path, out=wide[:, 20:68])
    assert got.data_ptr() == wide[:, 20:68].data_ptr()
    # The same kernel either way (split-K atomics may add in another order on a GPU).
    torch.testing.assert_close(wide[:, 20:68], alone, rtol=0, atol=1e-5 * float(alone.abs().max()))
    assert wide[:, :20].isnan().all() and wide[:, 68:].isnan().all()  # nothing written outside
