"""The tensor-core quantized GEMM (kernels/gguf_mma.py) vs dequantize_ref-then-matmul: every
config form (split K, the magic nibbles, row tiles past the last row), token counts across the
tiles, bias, and half-precision activations; the dispatcher's choice."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.gguf_formats import QuantizedWeight, dequantize_ref, random_quantized
from kvspill.kernels.gguf_mma import (
    MMA_CONFIGS,
    MMA_TYPES,
    SPLIT_K_MAX_ROWS,
    MmaConfig,
    mma_config,
    mma_t_pad,
    quant_matmul_mma,
)
from kvspill.kernels.quant_linear import quant_linear, quant_linear_path

ROWS = 37  # not a multiple of any row tile
IN_FEATURES = 3 * 256  # three super-blocks: an odd count for split K


def _case(qtype: str, num_tokens: int, dtype: torch.dtype, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    weight = random_quantized(qtype, ROWS, IN_FEATURES, gen)
    x = torch.randn((num_tokens, IN_FEATURES), generator=gen).to(dtype)
    bias = torch.randn((ROWS,), generator=gen).to(dtype)
    w_ref = dequantize_ref(weight.data, qtype, IN_FEATURES).double()
    return weight.to(device), x.to(device), bias.to(device), w_ref


def _check(out: torch.Tensor, x: torch.Tensor, w_ref: torch.Tensor, bias, rel: float) -> None:
    expected = x.cpu().double() @ w_ref.T
    if bias is not None:
        expected += bias.cpu().double()
    assert out.shape == expected.shape and out.dtype == x.dtype
    # Relative to the largest output: the dot products cancel, so per-element rtol is meaningless.
    torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=rel * float(expected.abs().max()))


CONFIGS = [
    MmaConfig(block_n=16, num_warps=1),
    MmaConfig(block_n=16, num_warps=2, split_k=2),
    MmaConfig(block_n=64, num_warps=4, split_k=3),
    MmaConfig(block_n=32, num_warps=2, magic=True),
]


@pytest.mark.parametrize("qtype", MMA_TYPES)
@pytest.mark.parametrize(
    "config",
    CONFIGS,
    ids=lambda c: f"n{c.block_n}s{c.split_k}m{int(c.magic)}",
)
def test_mma_fp32_matches_reference(qtype, config, device):
    weight, x, bias, w_ref = _case(qtype, 5, torch.float32, device)
    _check(quant_matmul_mma(x, weight, bias, config=config), x, w_ref, bias, rel=1e-5)


@pytest.mark.parametrize("qtype", MMA_TYPES)
@pytest.mark.parametrize("num_tokens", [2, 17, 64])
def test_mma_token_tiles(qtype, num_tokens, device):
    weight, x, _, w_ref = _case(qtype, num_tokens, torch.float32, device, seed=num_tokens)
    _check(quant_matmul_mma(x, weight), x, w_ref, None, rel=1e-5)


@pytest.mark.parametrize("qtype", MMA_TYPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mma_half_activations(qtype, dtype, device):
    weight, x, bias, w_ref = _case(qtype, 8, dtype, device, seed=3)
    # Only x's and the output's rounding differ from the fp64 reference.
    _check(quant_matmul_mma(x, weight, bias), x, w_ref, bias, rel=1e-2 if dtype == torch.bfloat16 else 2e-3)


def test_mma_token_tile_sizes():
    assert [mma_t_pad(n) for n in (1, 2, 16, 17, 32, 33, 64)] == [16, 16, 16, 32, 32, 64, 64]


def test_mma_rejects_other_types_and_too_many_tokens(device):
    weight, x, _, _ = _case("Q4_K", 65, torch.float32, device)
    with pytest.raises(AssertionError, match="1..64 tokens"):
        quant_matmul_mma(x, weight)
    gen = torch.Generator().manual_seed(0)
    q8 = random_quantized("Q8_0", 4, 256, gen).to(device)
    with pytest.raises(AssertionError, match="takes"):
        quant_matmul_mma(torch.zeros((2, 256), device=device), q8)


def test_dispatch_takes_the_measured_token_counts_only(device):
    weight, _, _, _ = _case("Q4_K", 1, torch.float32, device)
    # The lane GEMV (2 tokens) and dequantize-then-GEMM (17+) measured faster: no config there.
    assert [mma_config(weight, n) is not None for n in (1, 2, 3, 8, 16, 17, 64)] == [
        False,
        False,
        True,
        True,
        True,
        False,
        False,
    ]
    q6k, _, _, _ = _case("Q6_K", 1, torch.float32, device)
    assert mma_config(q6k, 8) is None
    rows = weight.data[:1].expand(SPLIT_K_MAX_ROWS + 1, -1)  # no copy: the dispatch reads no bytes
    wide = QuantizedWeight(rows, "Q4_K", SPLIT_K_MAX_ROWS + 1, weight.in_features)
    assert (
        mma_config(wide, 8).split_k == 1 and mma_config(weight, 8).split_k == MMA_CONFIGS[("Q4_K", 8)].split_k
    )


@pytest.mark.parametrize("num_tokens", [3, 8])
def test_quant_linear_mma_path(num_tokens, device):
    weight, x, bias, w_ref = _case("Q4_K", num_tokens, torch.float32, device, seed=5)
    expected_path = "mma" if device == "cuda" else "reference"
    assert quant_linear_path(x, weight) == expected_path
    # Forced on the CPU: the kernel under Triton's interpreter, with the dispatcher's config.
    _check(quant_linear(x, weight, bias, path="mma"), x, w_ref, bias, rel=1e-5)
