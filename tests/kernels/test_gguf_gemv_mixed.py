"""One launch for a fused projection of Q4_K / Q5_K rows then Q6_K rows at one token
(kernels/gguf_gemv_mixed.py): the same output as each part's own int16-x kernel, and when it is taken."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvspill.kernels import gguf_gemv, gguf_gemv_mixed
from kvspill.kernels.gguf_formats import random_quantized, split_q6k_rows
from kvspill.kernels.gguf_gemv import quant_matmul_gemv
from kvspill.kernels.gguf_gemv_mixed import mixed_gemv, mixed_gemv_config
from kvspill.model.quant import QuantLinear

# Not a multiple of the K steps (8 or 16 super-blocks): their last ones read past the end; even,
# as split Q6_K rows must be.
K = 10 * 256
ROWS_A, ROWS_B = 37, 19  # neither a multiple of a program's rows


def _parts(type_a: str, split_b: bool, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = random_quantized(type_a, ROWS_A, K, gen)
    b = random_quantized("Q6_K", ROWS_B, K, gen)
    if split_b:
        b = replace(b, data=split_q6k_rows(b.data), split=True)
    x = (torch.randn((1, K), generator=gen) * 4 + 1).to(torch.bfloat16)
    x[0, 64:96] = 0  # an all-zero sub-block
    return [a.to(device), b.to(device)], x.to(device)


def _same_chunks(monkeypatch, chunk_b: int = 2048) -> None:
    """Part B's own kernel at the K step the mixed kernel gives it: the same sums in the same order."""
    for table in ("Q6K_INT16X_CONFIGS", "Q6K_INT16X_SPLIT_CONFIGS"):
        monkeypatch.setattr(gguf_gemv, table, ((0, 0, (chunk_b, 2, 4)),))


@pytest.mark.parametrize("type_a", ["Q4_K", "Q5_K"])
@pytest.mark.parametrize("split_b", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_mixed_gemv_equals_each_parts_own_kernel(type_a, split_b, with_bias, device, monkeypatch):
    _same_chunks(monkeypatch)
    parts, x = _parts(type_a, split_b, device)
    bias = torch.randn((ROWS_A + ROWS_B,), generator=torch.Generator().manual_seed(1)).to(x.dtype).to(device)
    assert mixed_gemv_config(x, parts)
    out = torch.full((1, ROWS_A + ROWS_B), float("nan"), dtype=x.dtype, device=device)
    mixed_gemv(x, parts, bias if with_bias else None, out)
    biases = bias.split([ROWS_A, ROWS_B]) if with_bias else (None, None)
    want = torch.cat([quant_matmul_gemv(x, p, b) for p, b in zip(parts, biases, strict=True)], dim=1)
    assert torch.isfinite(out).all()
    assert torch.equal(out, want)


@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_mixed_gemv_runs_part_b_on_part_a_warps(warps, device, monkeypatch):
    # Part A's config sets the warp count; part B's rows a program come from MIXED_Q6K_CONFIGS.
    _same_chunks(monkeypatch)
    monkeypatch.setattr(gguf_gemv, "Q4K_INT16X_CONFIGS", ((0, 0, (1024, 8, warps)),))
    parts, x = _parts("Q4_K", True, device, seed=2)
    out = torch.empty((1, ROWS_A + ROWS_B), dtype=x.dtype, device=device)
    mixed_gemv(x, parts, None, out)
    assert torch.equal(out, torch.cat([quant_matmul_gemv(x, p) for p in parts], dim=1))


def test_mixed_gemv_is_taken_only_where_both_parts_run_int16x(device, monkeypatch):
    parts, x = _parts("Q4_K", False, device)
    assert mixed_gemv_config(x, parts)
    assert not mixed_gemv_config(torch.cat([x, x]), parts)  # two tokens: the lane passes / tensor cores
    assert not mixed_gemv_config(x, parts[::-1])  # Q6_K rows first: not this kernel's order
    assert not mixed_gemv_config(x, parts[:1])
    assert not mixed_gemv_config(x.float(), parts)  # fp32 x takes the float lanes
    q80 = random_quantized("Q8_0", ROWS_A, K, torch.Generator().manual_seed(3)).to(device)
    assert not mixed_gemv_config(x, [q80, parts[1]])
    monkeypatch.setenv("KVSPILL_MIXED_GEMV", "0")
    assert not mixed_gemv_config(x, parts)
    monkeypatch.setenv("KVSPILL_MIXED_GEMV", "1")
    monkeypatch.setenv("KVSPILL_INT16_X", "0")  # the parts' own kernels are the float lanes then
    assert not mixed_gemv_config(x, parts)


def test_mixed_configs_cover_every_warp_count_of_the_part_a_tables():
    tables = (gguf_gemv.Q4K_INT16X_CONFIGS, gguf_gemv.Q5K_INT16X_CONFIGS)
    warps = {config[2] for table in tables for _, _, config in table}
    assert warps <= set(gguf_gemv_mixed.MIXED_Q6K_CONFIGS)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="QuantLinear takes the kernels on CUDA only")
def test_quant_linear_of_mixed_parts_is_one_launch_with_the_same_output(monkeypatch):
    _same_chunks(monkeypatch)
    parts, x = _parts("Q4_K", True, "cuda", seed=4)
    layer = QuantLinear(K, [ROWS_A, ROWS_B], bias=False, dtype=x.dtype).cuda()
    layer.set_weight(parts)
    launches = []
    kernel = gguf_gemv_mixed.q4k_q6k_int16x_kernel
    monkeypatch.setattr(gguf_gemv_mixed, "q4k_q6k_int16x_kernel", _Counting(kernel, launches))
    out = layer(x)
    assert len(launches) == 1
    monkeypatch.setenv("KVSPILL_MIXED_GEMV", "0")
    torch.testing.assert_close(out, layer(x), rtol=0, atol=0)
    assert len(launches) == 1


class _Counting:
    """A Triton kernel whose launches are counted (kernel[grid](...))."""

    def __init__(self, kernel, launches: list) -> None:
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        self.launches.append(grid)
        return self.kernel[grid]
