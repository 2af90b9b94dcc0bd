"""One tensor-core launch for a fused projection of Q4_K rows then Q6_K rows at 3-32 tokens
(kernels/gguf_mma_mixed.py): the same output as each part's own words-form launch, and when it is
taken."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvspill.kernels import gguf_mma_mixed
from kvspill.kernels.gguf_formats import random_quantized, split_q6k_rows
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import MmaConfig, mma_config
from kvspill.kernels.gguf_mma_mixed import mixed_mma, mixed_mma_configs
from kvspill.kernels.gguf_mma_words import pack_scales

K = 4 * 256  # an even super-block count (split Q6_K rows need one)
ROWS_A, ROWS_B = 37, 19  # neither a multiple of a row tile

SPLIT_A = MmaConfig(block_n=32, num_warps=2, split_k=4, num_stages=2, words=True, two_acc=True)
SPLIT_B = MmaConfig(block_n=32, num_warps=2, split_k=2, num_stages=2, words=True)
ONE_A = MmaConfig(block_n=16, num_warps=2, split_k=1, num_stages=2, words=True)
ONE_B = MmaConfig(block_n=16, num_warps=2, split_k=1, num_stages=2, words=True, two_acc=True)


def _parts(split_b: bool, pairs: bool, num_tokens: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = random_quantized("Q4_K", ROWS_A, K, gen)
    b = random_quantized("Q6_K", ROWS_B, K, gen)
    if split_b:
        b = replace(b, data=split_q6k_rows(b.data), split=True)
    x = torch.randn((num_tokens, K), generator=gen).to(torch.bfloat16)
    if pairs:
        a = replace(a, scale_pairs=pack_scales(a, x.dtype))
    return [a.to(device), b.to(device)], x.to(device)


@pytest.mark.parametrize(
    "configs", [(SPLIT_A, SPLIT_B), (ONE_A, ONE_B), (SPLIT_A, ONE_B)], ids=["split", "one", "mixed"]
)
@pytest.mark.parametrize("num_tokens", [3, 8, 17])
@pytest.mark.parametrize("split_b", [False, True])
def test_mixed_mma_equals_each_parts_own_launch(configs, num_tokens, split_b, device):
    parts, x = _parts(split_b, pairs=False, num_tokens=num_tokens, device=device)
    out = torch.full((num_tokens, ROWS_A + ROWS_B), float("nan"), dtype=x.dtype, device=device)
    mixed_mma(x, parts, None, out, configs)
    want = torch.cat([quant_matmul_mma(x, p, config=c) for p, c in zip(parts, configs, strict=True)], dim=1)
    assert torch.isfinite(out).all()
    assert torch.equal(out, want)


@pytest.mark.parametrize("pairs", [False, True])
def test_mixed_mma_adds_the_bias_and_reads_part_a_pairs(pairs, device):
    parts, x = _parts(True, pairs=pairs, num_tokens=5, device=device, seed=1)
    bias = torch.randn((ROWS_A + ROWS_B,), generator=torch.Generator().manual_seed(2)).to(x.dtype).to(device)
    out = torch.empty((5, ROWS_A + ROWS_B), dtype=x.dtype, device=device)
    mixed_mma(x, parts, bias, out, (SPLIT_A, SPLIT_B))
    biases = bias.split([ROWS_A, ROWS_B])
    configs = (SPLIT_A, SPLIT_B)
    want = [quant_matmul_mma(x, p, b, config=c) for p, b, c in zip(parts, biases, configs, strict=True)]
    assert torch.equal(out, torch.cat(want, dim=1))


def test_mixed_mma_is_taken_where_both_parts_run_the_words_form_on_one_warp_count(device, monkeypatch):
    parts, x = _parts(True, pairs=False, num_tokens=8, device=device)
    configs = mixed_mma_configs(x, parts)
    assert configs == (mma_config(parts[0], 8), mma_config(parts[1], 8))
    for tokens in (1, 2, 33):  # the GEMV, the lane passes, the dequantize-then-GEMM path
        assert mixed_mma_configs(x[:1].expand(tokens, -1).contiguous(), parts) is None
    assert mixed_mma_configs(x.float(), parts) is None
    assert mixed_mma_configs(x, parts[::-1]) is None
    # part B's config with other warps than part A's: no mixed launch unless a table entry says
    warps_a = mma_config(parts[0], 8).num_warps
    other = replace(SPLIT_B, num_warps=2 * warps_a, block_n=64)
    monkeypatch.setattr(gguf_mma_mixed, "MIXED_Q6K_MMA_CONFIGS", {8: other})
    assert mixed_mma_configs(x, parts) is None
    monkeypatch.setattr(gguf_mma_mixed, "MIXED_Q6K_MMA_CONFIGS", {8: replace(other, num_warps=warps_a)})
    assert mixed_mma_configs(x, parts)[1] == replace(other, num_warps=warps_a)
    monkeypatch.setattr(gguf_mma_mixed, "MIXED_Q6K_MMA_CONFIGS", {})
    monkeypatch.setenv("KVSPILL_MIXED_MMA", "0")
    assert mixed_mma_configs(x, parts) is None
