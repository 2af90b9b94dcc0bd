"""The split Q6_K layout (kernels/gguf_formats.split_q6k_rows, KVSPILL_Q6K_SPLIT=1): the same bytes
moved, and every path that reads a Q6_K weight gives the same bits on it as on gguf's layout (the
Triton paths under the interpreter on the CPU, as they are on a GPU)."""

from __future__ import annotations

import pytest
import torch

from kvspill.env import q6k_split_on
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import QuantizedWeight, join_q6k_rows, random_quantized, split_q6k_rows
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import MmaConfig
from kvspill.kernels.quant_linear import quant_linear

ROWS = 37  # not a multiple of any row tile
IN_FEATURES = 2 * 256  # 420-byte rows: 4-byte aligned, as split rows must be


def _pair(device: str, seed: int = 0) -> tuple[QuantizedWeight, QuantizedWeight]:
    """A random Q6_K weight in gguf's layout and the same weight split."""
    weight = random_quantized("Q6_K", ROWS, IN_FEATURES, torch.Generator().manual_seed(seed))
    split = QuantizedWeight(split_q6k_rows(weight.data), "Q6_K", ROWS, IN_FEATURES, split=True)
    return weight.to(device), split.to(device)


def _x(tokens: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return (
        torch.randn((tokens, IN_FEATURES), generator=torch.Generator().manual_seed(tokens))
        .to(dtype)
        .to(device)
    )


def test_the_split_rows_hold_each_super_blocks_quants_then_its_scales():
    data = torch.randint(0, 256, (2, 3 * 210), dtype=torch.uint8)
    split = split_q6k_rows(data)
    for sb in range(3):
        assert torch.equal(split[:, 192 * sb : 192 * (sb + 1)], data[:, 210 * sb : 210 * sb + 192])
        scales = split[:, 3 * 192 + 18 * sb : 3 * 192 + 18 * (sb + 1)]
        assert torch.equal(scales, data[:, 210 * sb + 192 : 210 * (sb + 1)])
    assert torch.equal(join_q6k_rows(split), data)


def test_a_split_weight_keeps_its_layout_and_gives_gguf_rows_back():
    weight, split = _pair("cpu")
    assert split.to("cpu").split and split.rows(3, 9).split and split.rows(3, 9).out_features == 6
    assert torch.equal(split.rows(3, 9).gguf_rows(), weight.data[3:9])
    assert weight.gguf_rows() is weight.data
    q4k = random_quantized("Q4_K", 4, 256)
    with pytest.raises(AssertionError, match="only Q6_K"):
        QuantizedWeight(q4k.data, "Q4_K", 4, 256, split=True)
    odd = random_quantized("Q6_K", 4, 3 * 256)  # 630-byte rows: every other one 2 mod 4
    with pytest.raises(AssertionError, match="4-byte aligned"):
        QuantizedWeight(split_q6k_rows(odd.data), "Q6_K", 4, 3 * 256, split=True)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize(
    ("tokens", "dtype", "int16_x"),
    [
        (1, torch.bfloat16, True),  # the one-token int16-x kernel
        (1, torch.bfloat16, False),  # the float lanes
        (3, torch.float32, True),  # the multi-token lanes
    ],
)
def test_the_lane_gemvs_read_split_rows(tokens, dtype, int16_x, device, monkeypatch):
    monkeypatch.setenv("KVSPILL_INT16_X", "1" if int16_x else "0")
    weight, split = _pair(device)
    x = _x(tokens, dtype, device)
    assert _same(gguf_gemv.quant_matmul_gemv(x, split), gguf_gemv.quant_matmul_gemv(x, weight))


@pytest.mark.parametrize("config", [(2048, 1, 1), (2048, 4, 4)])  # the split table's own picks
def test_the_int16x_gemv_reads_split_rows_at_the_split_picks(config, device, monkeypatch):
    monkeypatch.setenv("KVSPILL_INT16_X", "1")
    monkeypatch.setattr(gguf_gemv, "Q6K_INT16X_CONFIGS", ((0, 0, config),))
    monkeypatch.setattr(gguf_gemv, "Q6K_INT16X_SPLIT_CONFIGS", ((0, 0, config),))
    weight, split = _pair(device, seed=7)
    x = _x(1, torch.bfloat16, device)
    assert _same(gguf_gemv.quant_matmul_gemv(x, split), gguf_gemv.quant_matmul_gemv(x, weight))


@pytest.mark.parametrize("tokens", [1, 5])  # the generic FMA kernel, the dot kernel
def test_the_generic_gemvs_read_split_rows(tokens, device, monkeypatch):
    monkeypatch.setattr(gguf_gemv, "LANE_KERNELS", {"Q4_K"})
    weight, split = _pair(device, seed=1)
    x = _x(tokens, torch.float32, device)
    assert _same(gguf_gemv.quant_matmul_gemv(x, split), gguf_gemv.quant_matmul_gemv(x, weight))


@pytest.mark.parametrize(
    "config",
    [
        MmaConfig(block_n=32, num_warps=2, split_k=2, num_stages=2, words=True),
        MmaConfig(block_n=32, num_warps=4, magic=True),  # the sub-block form (split K adds by atomics)
        MmaConfig(block_n=32, num_warps=4, whole=True),
    ],
    ids=["words", "sub", "whole"],
)
def test_the_tensor_core_forms_read_split_rows(config, device):
    weight, split = _pair(device, seed=2)
    x = _x(6, torch.float32, device)
    assert _same(quant_matmul_mma(x, split, config=config), quant_matmul_mma(x, weight, config=config))


def test_dequantize_and_the_reference_read_split_rows(device):
    weight, split = _pair(device, seed=3)
    assert _same(dequantize(split, torch.float32), dequantize(weight, torch.float32))
    assert _same(dequantize(split.rows(5, 20), torch.float32), dequantize(weight.rows(5, 20), torch.float32))
    x = _x(2, torch.float32, "cpu")
    assert _same(quant_linear(x, split.to("cpu")), quant_linear(x, weight.to("cpu")))  # the torch reference


def test_the_switch_is_on_unless_set_to_0(monkeypatch):
    monkeypatch.delenv("KVSPILL_Q6K_SPLIT", raising=False)
    assert q6k_split_on()
    monkeypatch.setenv("KVSPILL_Q6K_SPLIT", "0")
    assert not q6k_split_on()
    monkeypatch.setenv("KVSPILL_Q6K_SPLIT", "1")
    assert q6k_split_on()
    monkeypatch.setenv("KVSPILL_Q6K_SPLIT", "yes")
    with pytest.raises(ValueError, match="0 or 1"):
        q6k_split_on()
