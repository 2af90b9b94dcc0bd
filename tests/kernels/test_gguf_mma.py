"""The tensor-core quantized GEMM (kernels/gguf_mma.py), Q4_K and Q6_K, vs dequantize_ref-then-
matmul: every config form (split K, the magic quants, row tiles past the last row), token counts
across the tiles, bias, and half-precision activations; Q6_K's 2-byte aligned rows; the magic
form's bit patterns in each dot dtype; the dispatcher's choice."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels import gguf_mma_words
from kvspill.kernels.fused_ops import silu_and_mul, silu_and_mul_ref
from kvspill.kernels.gguf_formats import QuantizedWeight, dequantize_ref, q4k_fields, random_quantized
from kvspill.kernels.gguf_mma import _as_128_plus, mma_t_pad, quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import (
    MMA_CONFIGS,
    MMA_MAX_TOKENS,
    MMA_TYPES,
    SPLIT_K_MAX_ROWS,
    WHOLE_TYPES,
    WORDS_TYPES,
    MmaConfig,
    for_shape,
    mma_config,
    parse_mma_configs,
)
from kvspill.kernels.gguf_mma_words import (
    pack_scales,
    q4k_words_x_ref,
    q6k_words_x_ref,
    words_x,
    words_x_split,
)
from kvspill.kernels.quant_linear import quant_linear, quant_linear_path
from kvspill.kernels.triton_compat import tl, triton

ROWS = 37  # not a multiple of any row tile
IN_FEATURES = 3 * 256  # three super-blocks: an odd count for split K; Q6_K rows of 630 bytes


def _case(qtype: str, num_tokens: int, dtype: torch.dtype, device: str, seed: int = 0, rows: int = ROWS):
    gen = torch.Generator().manual_seed(seed)
    weight = random_quantized(qtype, rows, IN_FEATURES, gen)
    x = torch.randn((num_tokens, IN_FEATURES), generator=gen).to(dtype)
    bias = torch.randn((rows,), generator=gen).to(dtype)
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
    assert [mma_t_pad(n) for n in (1, 2, 8, 9, 16, 17, 32, 33, 64)] == [8, 8, 8, 16, 16, 32, 32, 64, 64]


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
    # The lane GEMV (2 tokens) and dequantize-then-GEMM (33+, the words form untimed) keep their paths.
    taken = [mma_config(weight, n) is not None for n in (1, 2, 3, 8, 16, 17, 32, 33, 64)]
    assert taken == [False, False, True, True, True, True, True, False, False]
    # Q6_K: its lane GEMV at 2 tokens, the words form at 3-32.
    q6k, x6, _, _ = _case("Q6_K", MMA_MAX_TOKENS, torch.float32, device)
    assert [n for n in range(1, MMA_MAX_TOKENS + 1) if mma_config(q6k, n) is not None] == list(range(3, 33))
    if device == "cuda":  # on the CPU every count takes the C++ kernel's paths (kernels/cpu_gguf.py)
        paths = {n: quant_linear_path(x6[:n], q6k) for n in (1, 2, 4, 8, 16, 40)}
        assert paths == {1: "gemv", 2: "gemv", 4: "mma", 8: "mma", 16: "mma", 40: "dequant_matmul"}
    rows = weight.data[:1].expand(SPLIT_K_MAX_ROWS + 1, -1)  # no copy: the dispatch reads no bytes
    wide = QuantizedWeight(rows, "Q4_K", SPLIT_K_MAX_ROWS + 1, weight.in_features)
    table = MMA_CONFIGS[("Q4_K", 8)]
    assert mma_config(wide, 8).split_k == 1
    assert mma_config(weight, 8) == for_shape(table, weight.out_features, weight.in_features)


@pytest.mark.parametrize("num_tokens", [3, 8])
def test_quant_linear_mma_path(num_tokens, device):
    weight, x, bias, w_ref = _case("Q4_K", num_tokens, torch.float32, device, seed=5)
    expected_path = "mma" if device == "cuda" else "cpu_gemv"  # the CPU's C++ kernel
    assert quant_linear_path(x, weight) == expected_path
    # Forced on the CPU: the kernel under Triton's interpreter, with the dispatcher's config.
    _check(quant_linear(x, weight, bias, path="mma"), x, w_ref, bias, rel=1e-5)


def _shifted(weight: QuantizedWeight, shift: int) -> QuantizedWeight:
    """`weight` with its bytes copied `shift` bytes past an aligned allocation."""
    buf = torch.zeros(weight.nbytes + shift, dtype=torch.uint8, device=weight.device)
    buf[shift:] = weight.data.flatten()
    data = buf[shift:].view(weight.out_features, weight.bytes_per_row)
    return QuantizedWeight(data, weight.qtype, weight.out_features, weight.in_features)


@pytest.mark.parametrize("rows", [5, ROWS])  # fewer rows than a tile; a tile past the last row
def test_mma_q6k_two_byte_aligned_rows(rows, device):
    # 630-byte rows: odd rows and the second super-block of each row start at 2 mod 4, and the
    # data starts at 2 mod 4: Q6_K reads only bytes and an fp16, so it runs there; Q4_K refuses.
    weight, x, bias, w_ref = _case("Q6_K", 6, torch.float32, device, seed=7, rows=rows)
    shifted = _shifted(weight, 2)
    assert shifted.data.data_ptr() % 4 == 2
    for config in (
        MmaConfig(block_n=64, num_warps=4),
        MmaConfig(block_n=16, num_warps=2, split_k=2, magic=True),
    ):
        _check(quant_matmul_mma(x, shifted, bias, config=config), x, w_ref, bias, rel=1e-5)
    q4k = _shifted(_case("Q4_K", 6, torch.float32, device)[0], 2)
    assert mma_config(q4k, 8) is None
    with pytest.raises(AssertionError, match="4-byte aligned"):
        quant_matmul_mma(x, q4k, config=MmaConfig(block_n=16, num_warps=2))


@triton.jit
def _as_128_plus_kernel(q_ptr, out_ptr, DOT_DTYPE: tl.constexpr):
    i = tl.arange(0, 64)
    tl.store(out_ptr + i, _as_128_plus(tl.load(q_ptr + i), DOT_DTYPE).to(tl.float32))


@pytest.mark.parametrize("dot_dtype", [tl.float32, tl.bfloat16, tl.float16], ids=str)
def test_magic_quants_are_128_plus_q(dot_dtype, device):
    # Every 6-bit quant (Q6_K's range; Q4_K's nibbles are its first 16) in each dot dtype: on the
    # CPU the kernel runs the fp32 form only, so the bf16 and fp16 bit patterns are checked here.
    q = torch.arange(64, dtype=torch.uint8, device=device)
    out = torch.empty(64, dtype=torch.float32, device=device)
    _as_128_plus_kernel[(1,)](q, out, DOT_DTYPE=dot_dtype)
    assert torch.equal(out.cpu(), 128 + torch.arange(64, dtype=torch.float32))


WHOLE_CONFIGS = [
    MmaConfig(block_n=16, num_warps=2, whole=True),
    MmaConfig(block_n=64, num_warps=4, split_k=2, whole=True),
]


WORDS_CONFIGS = [
    MmaConfig(block_n=16, num_warps=1, words=True),
    MmaConfig(block_n=64, num_warps=4, split_k=2, num_stages=3, words=True),
    MmaConfig(block_n=32, num_warps=2, split_k=2, num_stages=2, words=True, two_acc=True),
]


def _form_id(c: MmaConfig) -> str:
    return f"{'words' if c.words else 'whole'}-n{c.block_n}s{c.split_k}{'-two' if c.two_acc else ''}"


def _forms(configs: list[MmaConfig]) -> list:
    """(type, config) for each type a config's form takes (Q5_K has no words form, Q4_1 neither
    words nor whole)."""
    return [
        pytest.param(qtype, c, id=f"{qtype}-{_form_id(c)}")
        for qtype in MMA_TYPES
        for c in configs
        if (qtype in WORDS_TYPES or not c.words) and (qtype in WHOLE_TYPES or not c.whole)
    ]


@pytest.mark.parametrize(("qtype", "config"), _forms(WHOLE_CONFIGS + WORDS_CONFIGS))
@pytest.mark.parametrize("num_tokens", [1, 5, 17])
def test_mma_dequantizing_forms_match_reference(qtype, config, num_tokens, device):
    # In fp32 the dequantized weights are exact: only the reduction order differs.
    seed = (21 if config.words else 11) + num_tokens
    weight, x, bias, w_ref = _case(qtype, num_tokens, torch.float32, device, seed=seed)
    _check(quant_matmul_mma(x, weight, bias, config=config), x, w_ref, bias, rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("qtype", "config"), _forms([WHOLE_CONFIGS[0], *WORDS_CONFIGS[1:]]))
def test_mma_dequantizing_forms_half_activations(qtype, dtype, config, device):
    # The weights are rounded to x's dtype before the dot, as the dequantize-then-GEMM path does
    # (on a GPU the words form's magic-number asm rounds its scales to x's dtype first).
    weight, x, bias, w_ref = _case(qtype, 8, dtype, device, seed=7 if config.words else 5)
    out = quant_matmul_mma(x, weight, bias, config=config)
    _check(out, x, w_ref, bias, rel=2e-2 if dtype == torch.bfloat16 else 4e-3)


@pytest.mark.parametrize("config", [WHOLE_CONFIGS[1], WORDS_CONFIGS[1]], ids=_form_id)
def test_mma_q6k_dequantizing_forms_on_two_byte_aligned_rows(config, device):
    weight, x, bias, w_ref = _case("Q6_K", 3, torch.float32, device, seed=9)
    shifted = _shifted(weight, 2)
    _check(quant_matmul_mma(x, shifted, bias, config=config), x, w_ref, bias, rel=1e-5)


def test_q4k_words_x_permutes_each_super_block(device):
    x = torch.arange(2 * 512, dtype=torch.float32).view(2, 512)
    xt = q4k_words_x_ref(x, 16)
    assert xt.shape == (2, 8, 32, 16) and not xt[..., 2:].any()
    for sb, m, r in [(0, 0, 0), (0, 1, 0), (0, 2, 9), (1, 7, 31), (1, 5, 17)]:
        b, h, j, i = m // 2, m % 2, r // 8, r % 8
        column = 256 * sb + 64 * j + 32 * h + 4 * i + b
        assert xt[sb, m, r, :2].tolist() == x[:, column].tolist()
    wide = torch.randn((3, 600), dtype=torch.bfloat16).to(device)[:, :512]  # rows of x, strided
    assert torch.equal(words_x(wide, "Q4_K", 16).cpu(), q4k_words_x_ref(wide.cpu(), 16))


def test_q6k_words_x_permutes_each_super_block(device):
    x = torch.arange(2 * 512, dtype=torch.float32).view(2, 512)
    xt = q6k_words_x_ref(x, 16)
    assert xt.shape == (2 * 16, 16, 16) and not xt[..., 2:].any()
    cases = [(0, 0, 0, 0, 0), (0, 0, 0, 1, 0), (0, 1, 2, 0, 9), (1, 1, 3, 1, 15), (1, 0, 1, 1, 7)]
    for sb, half, i, e, p in cases:
        plane = sb * 16 + half * 8 + 2 * i + e
        column = 256 * sb + 128 * half + 32 * i + 2 * p + e
        assert xt[plane, p, :2].tolist() == x[:, column].tolist()
    wide = torch.randn((3, 600), dtype=torch.bfloat16).to(device)[:, :512]
    assert torch.equal(words_x(wide, "Q6_K", 16).cpu(), q6k_words_x_ref(wide.cpu(), 16))


@pytest.mark.parametrize("rows", [256, 64, 16])
@pytest.mark.parametrize("qtype", WORDS_TYPES)
def test_words_x_splits_a_super_block_over_programs(rows, qtype, device, monkeypatch):
    # Programs of `rows` rows of each super-block's slab: the same permutation, every counter
    # zeroed by the 2-D grid's shares.
    monkeypatch.setattr(gguf_mma_words, "words_x_split", lambda k, t_pad: (rows, 2))
    ref = q4k_words_x_ref if qtype == "Q4_K" else q6k_words_x_ref
    x = torch.randn((3, 600), dtype=torch.bfloat16).to(device)[:, :512]
    counters = torch.full((37,), 7, dtype=torch.int32).to(device)
    assert torch.equal(words_x(x, qtype, 8, counters).cpu(), ref(x.cpu(), 8))
    assert counters.eq(0).all()


def test_words_x_split_aims_for_enough_programs_of_enough_values():
    assert words_x_split(4096, 8) == (128, 2)  # 32 programs of 1,024 values
    assert words_x_split(4096, 32) == (32, 2)  # 128 programs
    assert words_x_split(14336, 32) == (64, 4)  # 224 programs
    assert words_x_split(14336, 64) == (64, 4)
    assert words_x_split(512, 16) == (64, 2)
    for k in (512, 4096, 14336, 28672):
        for t_pad in (8, 16, 32, 64):
            rows, _ = words_x_split(k, t_pad)
            assert 16 <= rows <= 256 and 256 % rows == 0


@pytest.mark.parametrize("num_counters", [0, 3, 600])
def test_words_x_zeroes_the_split_counters(num_counters, device):
    # 2 programs (K = 512): 300 counters each at 600, more than one 256-wide store a program.
    counters = torch.full((max(num_counters, 1),), 7, dtype=torch.int32).to(device)
    x = torch.randn((2, 512)).to(device)
    words_x(x, "Q4_K", 16, counters[:num_counters] if num_counters else None)
    assert counters[:num_counters].eq(0).all() and (num_counters or counters.item() == 7)


@pytest.mark.parametrize("qtype", WORDS_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_words_x_is_the_silu_kernels_output_permuted(qtype, dtype, device):
    # One launch for the SiLU and the permutation: the same bits as silu_and_mul then words_x,
    # padded tokens zero; rows of gate_up strided (a column slice of a wider output).
    gate_up = (3 * torch.randn((3, 1100))).to(dtype).to(device)[:, :1024]
    counters = torch.full((5,), 7, dtype=torch.int32).to(device)
    gated = words_x(gate_up, qtype, 16, counters, gated=True)
    assert torch.equal(gated.cpu(), words_x(silu_and_mul(gate_up), qtype, 16).cpu())
    assert counters.eq(0).all()


@pytest.mark.parametrize("qtype", WORDS_TYPES)
@pytest.mark.parametrize("config", [*WORDS_CONFIGS[:2], CONFIGS[1]], ids=_form_id)
def test_mma_gated_equals_the_silu_kernel_then_the_product(qtype, config, device):
    # The words form applies the SiLU in its x permutation; the other forms run silu_and_mul first.
    gen = torch.Generator().manual_seed(51)
    weight = random_quantized(qtype, ROWS, IN_FEATURES, gen).to(device)
    gate_up = torch.randn((5, 2 * IN_FEATURES), generator=gen).to(device)
    bias = torch.randn((ROWS,), generator=gen).to(device)
    gated = quant_matmul_mma(gate_up, weight, bias, config=config, gated=True)
    assert torch.equal(gated, quant_matmul_mma(silu_and_mul(gate_up), weight, bias, config=config))


@pytest.mark.parametrize("path", ["mma", "gemv", "reference"])
def test_quant_linear_gated_on_every_path(path, device):
    if path == "reference" and device != "cpu":
        pytest.skip("the reference path takes CPU tensors")
    gen = torch.Generator().manual_seed(53)
    weight = random_quantized("Q4_K", ROWS, IN_FEATURES, gen).to(device)
    gate_up = torch.randn((2, 3, 2 * IN_FEATURES), generator=gen).to(device)  # [..., 2 K]
    gated = quant_linear(gate_up, weight, gated=True, path=path)
    silu = (
        silu_and_mul_ref(gate_up) if path == "reference" else silu_and_mul(gate_up.view(6, -1)).view(2, 3, -1)
    )
    assert gated.shape == (2, 3, ROWS)
    assert torch.equal(gated, quant_linear(silu, weight, path=path))
    with pytest.raises(AssertionError, match="gated: True"):
        quant_linear(gate_up[..., :IN_FEATURES], weight, gated=True, path=path)


def test_words_split_k_adds_the_bias_once_and_matches_one_split(device):
    weight, x, bias, w_ref = _case("Q4_K", 4, torch.float32, device, seed=31)
    three = quant_matmul_mma(
        x, weight, bias, config=MmaConfig(block_n=16, num_warps=1, split_k=3, words=True)
    )
    one = quant_matmul_mma(x, weight, bias, config=MmaConfig(block_n=16, num_warps=1, words=True))
    _check(three, x, w_ref, bias, rel=1e-5)
    # Only the fp32 summation order differs (the GPU's dots group the products otherwise).
    torch.testing.assert_close(three, one, rtol=0, atol=2e-5 * float(one.abs().max()))


def _with_pairs(weight: QuantizedWeight, pairs: torch.Tensor) -> QuantizedWeight:
    return QuantizedWeight(weight.data, weight.qtype, weight.out_features, weight.in_features, pairs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pack_scales_are_the_headers_scales_rounded_once(dtype, device):
    weight = _case("Q4_K", 1, torch.float32, device, seed=41)[0]
    pairs = pack_scales(weight, dtype)
    scale, offset, _ = q4k_fields(weight.data, IN_FEATURES)
    assert pairs.shape == (ROWS, IN_FEATURES // 16) and pairs.dtype == dtype
    assert torch.equal(pairs[:, 0::2], scale.to(dtype)) and torch.equal(pairs[:, 1::2], (-offset).to(dtype))
    low = pairs.view(torch.int32) & 0xFFFF  # the kernel's int32 view: d*sc in the low half
    assert torch.equal(low.to(torch.int16), scale.to(dtype).view(torch.int16))
    held = _with_pairs(weight, pairs)
    assert held.nbytes == weight.nbytes + ROWS * IN_FEATURES // 8
    assert held.to("cpu").scale_pairs is not None
    with pytest.raises(AssertionError, match="scale_pairs"):
        _with_pairs(weight, pairs[:, :-2].contiguous())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", WORDS_CONFIGS, ids=_form_id)
def test_words_form_reads_the_scale_pairs(dtype, config, device):
    weight, x, bias, w_ref = _case("Q4_K", 8, dtype, device, seed=43)
    paired = _with_pairs(weight, pack_scales(weight, dtype))
    out = quant_matmul_mma(x, paired, bias, config=config)
    _check(out, x, w_ref, bias, rel=2e-2 if dtype == torch.bfloat16 else 4e-3)
    header = quant_matmul_mma(x, weight, bias, config=config)
    if (
        device == "cuda" and dtype == torch.bfloat16
    ):  # the asm rounds the header's scales to the pairs' values
        assert torch.equal(out, header)
    elif device == "cuda":  # fp16 was not bit-equal on an H200, cause not found (2026-12-04-h200-scale-pairs)
        torch.testing.assert_close(out, header, rtol=0, atol=2e-3 * float(header.abs().max()))
    # the pairs, not the header, scale the quants: zero pairs leave the bias alone
    zero = _with_pairs(weight, torch.zeros_like(paired.scale_pairs))
    assert torch.equal(quant_matmul_mma(x, zero, bias, config=config), bias.expand(8, -1))
    # pairs of another dtype than x's are not read
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    mismatched = _with_pairs(weight, torch.zeros((ROWS, IN_FEATURES // 16), dtype=other, device=device))
    assert torch.equal(quant_matmul_mma(x, mismatched, bias, config=config), header)


def test_words_and_whole_are_two_forms():
    with pytest.raises(ValueError, match="not whole and words"):
        MmaConfig(block_n=16, num_warps=1, whole=True, words=True)
    with pytest.raises(ValueError, match="two_acc only with words"):
        MmaConfig(block_n=16, num_warps=1, two_acc=True)


def test_tuned_configs_file_overrides_and_removes_entries(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "mma.json"
    path.write_text('{"Q6_K,16": {"block_n": 64, "num_warps": 2, "whole": true}, "Q4_K,4": null}')
    code = "from kvspill.kernels.gguf_mma_configs import MMA_CONFIGS as C; print(C.get(('Q6_K', 16)), ('Q4_K', 4) in C)"
    import os

    env = {"KVSPILL_MMA_CONFIGS": str(path), "PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")  # where kvspill comes from a path, not an install
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == (
        "MmaConfig(block_n=64, num_warps=2, split_k=1, num_stages=1, magic=False, whole=True, words=False, "
        "sb_per_split=0, two_acc=False, wide_split_k=1) False"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1]", "expected an object"),
        ('{"Q8_0,8": {}}', "TYPE,TOKENS"),
        ('{"Q4_K,3": {}}', "TYPE,TOKENS"),
        ('{"Q4_K,8": {"block_n": 24, "num_warps": 2}}', "block_n a power of two"),
        ('{"Q4_K,8": {"block_n": 32}}', "num_warps"),
        ('{"Q5_K,8": {"block_n": 32, "num_warps": 2, "words": true}}', "Q5_K has no words form"),
        ('{"Q4_1,8": {"block_n": 32, "num_warps": 2, "whole": true}}', "Q4_1 has no whole form"),
        ("{oops", "not JSON"),
    ],
)
def test_tuned_configs_file_errors_say_what_to_fix(text, message):
    with pytest.raises(ValueError, match=message):
        parse_mma_configs(text, "f.json")


@pytest.mark.parametrize("num_tokens", [2, 8, 16, 32])
def test_q5k_takes_the_kernel_at_its_measured_counts_and_where_a_tuned_file_says(num_tokens, device):
    # The measured entries (2-32 tokens) take the sub-block form; 33-64 keep dequantize-then-GEMM
    # until a tuned file's entry (KVSPILL_MMA_CONFIGS) sends them, null sends a count back. Words: refused.
    weight, x, _, w_ref = _case("Q5_K", num_tokens, torch.float32, device)
    assert [n for n in range(1, MMA_MAX_TOKENS + 1) if mma_config(weight, n) is not None] == list(
        range(2, 33)
    )
    assert not MMA_CONFIGS[("Q5_K", 8)].words
    if device == "cuda":
        assert quant_linear_path(x, weight) == "mma"
    _check(quant_matmul_mma(x, weight), x, w_ref, None, rel=1e-5)
    tuned = parse_mma_configs(
        '{"Q5_K,64": {"block_n": 32, "num_warps": 2, "magic": true}, "Q5_K,4": null}', "f.json"
    )
    saved = dict(MMA_CONFIGS)
    try:
        for key, config in tuned.items():
            if config is None:
                MMA_CONFIGS.pop(key)
            else:
                MMA_CONFIGS[key] = config
        assert mma_config(weight, 40) == for_shape(
            tuned[("Q5_K", 64)], weight.out_features, weight.in_features
        )
        assert mma_config(weight, 3) is None and mma_config(weight, 5) is not None
    finally:
        MMA_CONFIGS.clear()
        MMA_CONFIGS.update(saved)
    with pytest.raises(AssertionError, match="no words form"):
        quant_matmul_mma(x, weight, config=WORDS_CONFIGS[0])


@pytest.mark.parametrize(
    "config", [CONFIGS[3], WHOLE_CONFIGS[1]], ids=lambda c: "whole" if c.whole else "magic"
)
def test_q5k_fifth_bits_count(config, device):
    # Every qh bit set, then none: the two products differ by 16 * d*sc * sum(x) per sub-block,
    # and both match the reference (a kernel that dropped the fifth bit passes only the second).
    weight, x, _, _ = _case("Q5_K", 3, torch.float32, device, seed=13)
    data = weight.data.cpu().clone().view(ROWS, -1, 176)
    for fill in (255, 0):
        data[..., 16:48] = fill
        w = QuantizedWeight(data.view(ROWS, -1).to(device), "Q5_K", ROWS, IN_FEATURES)
        w_ref = dequantize_ref(data.view(ROWS, -1), "Q5_K", IN_FEATURES).double()
        _check(quant_matmul_mma(x, w, config=config), x, w_ref, None, rel=1e-5)


@pytest.mark.parametrize("num_tokens", [2, 3, 8, 16, 32])
def test_q41_takes_the_sub_block_form_at_its_measured_counts(num_tokens, device):
    # Q4_1 (AWQ / GPTQ checkpoints): the measured entries take 2-32 tokens (1 keeps the lane GEMV,
    # 33+ dequantize-then-GEMM); rows of 32-weight blocks take the kernel only when K is whole
    # super-blocks of 256; no words or whole form.
    weight, x, bias, w_ref = _case("Q4_1", num_tokens, torch.float32, device, seed=17)
    taken = [n for n in range(1, MMA_MAX_TOKENS + 1) if mma_config(weight, n) is not None]
    assert taken == list(range(2, 33))
    shipped = MMA_CONFIGS[("Q4_1", triton.next_power_of_2(num_tokens))]
    assert mma_config(weight, num_tokens) == for_shape(shipped, weight.out_features, weight.in_features)
    _check(quant_matmul_mma(x, weight, bias), x, w_ref, bias, rel=1e-5)
    gen = torch.Generator().manual_seed(3)
    short = random_quantized("Q4_1", ROWS, 41 * 32, gen).to(device)  # 41 blocks: not whole super-blocks
    assert mma_config(short, num_tokens) is None
    for other_form in (WORDS_CONFIGS[0], WHOLE_CONFIGS[0]):
        with pytest.raises(AssertionError, match="Q4_1 has no"):
            quant_matmul_mma(x, weight, config=other_form)


def test_q41_nibbles_and_offsets_count(device):
    # Each block's d and m and both nibble halves: all-15 quants with m = 0, then all-0 quants
    # (only m * sum(x) left); a kernel that swapped the halves or dropped m passes neither.
    weight, x, _, _ = _case("Q4_1", 3, torch.float32, device, seed=19)
    data = weight.data.cpu().clone().view(ROWS, -1, 20)
    for quants, offset in ((0xFF, 0.0), (0x00, 0.5)):
        data[..., 4:] = quants
        data[..., 2:4] = torch.tensor([offset], dtype=torch.float16).view(torch.uint8)
        data[:, ::3, 4:6] = 0x0F  # a few high nibbles cleared apart from their low ones
        w = QuantizedWeight(data.view(ROWS, -1).to(device), "Q4_1", ROWS, IN_FEATURES)
        w_ref = dequantize_ref(data.view(ROWS, -1), "Q4_1", IN_FEATURES).double()
        _check(quant_matmul_mma(x, w, config=CONFIGS[3]), x, w_ref, None, rel=1e-5)
