"""The int16-x one-token Q4_K kernel (kernels/gguf_gemv_int16x.py): its reference, the exact product
within x's int16 rounding, and the switch that picks it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_formats import dequantize_ref, q4k_fields, random_quantized
from kvspill.kernels.gguf_gemv_int16x import (
    Q4K_X_GROUP,
    int16_x_blocks,
    q4k_int16x_ref,
    q6k_int16x_ref,
    q41_int16x_ref,
    q80_int16x_ref,
)

ROWS = 19  # not a multiple of BLOCK_N


def _case(super_blocks: int, seed: int, device: str, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    k = super_blocks * 256
    weight = random_quantized("Q4_K", ROWS, k, gen)
    x = (torch.randn((1, k), generator=gen) * 4 + 1).to(dtype)
    x[0, 64:96] = 0  # an all-zero sub-block: scale 0, no NaN
    x[0, 100] = 300.0  # an outlier: its sub-block's scale is large, the others' are not
    return weight.to(device), x.to(device)


def _int16x(x: torch.Tensor, weight, bias=None) -> torch.Tensor:
    """The kernel's fp32 output (no rounding to x's dtype)."""
    out = torch.empty((1, weight.out_features), dtype=torch.float32, device=x.device)
    gguf_gemv._launch_lane_kernel(x, weight, bias, out, gguf_gemv.FMA_CONFIG["Q4_K"])
    return out


@pytest.mark.parametrize("config", [(2048, 8, 2), (512, 4, 1), (1024, 8, 1), (4096, 16, 4), (8192, 4, 4)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int16x_kernel_matches_its_reference(config, dtype, device, monkeypatch):
    # 9 super-blocks: the K loop's last step reads past the end for every chunk here.
    monkeypatch.setenv("KVSPILL_INT16_X", "1")
    monkeypatch.setattr(gguf_gemv, "Q4K_INT16X_CONFIGS", ((0, 0, config),))
    weight, x = _case(9, seed=1, device=device, dtype=dtype)
    bias = torch.randn((ROWS,), generator=torch.Generator().manual_seed(2)).to(device)
    out = _int16x(x, weight, bias).cpu()
    want = q4k_int16x_ref(x.cpu(), weight.data.cpu(), weight.in_features) + bias.cpu()
    assert torch.isfinite(out).all()
    # The same integer sums; only fp32 rounding of the scaled terms differs.
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5 * float(want.abs().max()))


def test_int16x_error_is_bounded_by_x_rounding(device, monkeypatch):
    # |x @ W - int16x| <= sum over groups of Q4K_X_GROUP x values of (2**e / 2) * sum |d * sc * q|
    # per row: the kernel approximates only x (rounded to a multiple of 2**e <= 2**-13 amax of its
    # group).
    monkeypatch.setenv("KVSPILL_INT16_X", "1")
    weight, x = _case(3, seed=3, device=device)
    out = _int16x(x, weight).cpu().double()
    data, xf = weight.data.cpu(), x.cpu().double()
    exact = xf @ dequantize_ref(data, "Q4_K", weight.in_features).double().t()
    scale, _, q = q4k_fields(data, weight.in_features)
    _, dx = int16_x_blocks(x.cpu(), group=Q4K_X_GROUP)
    dx = dx[0].double()  # [K / group]
    amax = xf.reshape(-1, Q4K_X_GROUP).abs().amax(dim=1)
    assert ((dx <= amax * 2**-13) | (amax == 0)).all()
    rows, halves = q.shape[0], 32 // Q4K_X_GROUP
    q_sums = q.double().reshape(rows, -1, Q4K_X_GROUP).sum(dim=2)  # [rows, K / group]
    per_group = scale.double().abs().repeat_interleave(halves, dim=1) * q_sums * (dx / 2)[None]
    bound = per_group.sum(dim=1)[None]
    err = (out - exact).abs()
    assert (err <= bound * 1.001 + 1e-6 * float(exact.abs().max())).all()
    assert float(err.max()) > 0  # x really was rounded: the kernel is not the exact one


class _Spy:
    """Stands in for a Triton kernel in gguf_gemv: records its launches, then launches it."""

    def __init__(self, kernel, name: str, launched: list[str]) -> None:
        self.kernel, self.name, self.launched = kernel, name, launched

    def __getitem__(self, grid):
        self.launched.append(self.name)
        return self.kernel[grid]


def _spy_on(monkeypatch, *names: str) -> list[str]:
    """gguf_gemv's kernels `names` replaced by _Spy: the list their launches are recorded in."""
    launched: list[str] = []
    for name in names:
        monkeypatch.setattr(gguf_gemv, name, _Spy(getattr(gguf_gemv, name), name, launched))
    return launched


def test_int16x_switch_picks_the_kernel(device, monkeypatch):
    launched = _spy_on(monkeypatch, "q4k_int16x_kernel", "q4k_one_token_kernel")
    weight, x = _case(2, seed=4, device=device)
    want_exact = x.cpu().double() @ dequantize_ref(weight.data.cpu(), "Q4_K", weight.in_features).double().t()
    want_int16x = q4k_int16x_ref(x.cpu(), weight.data.cpu(), weight.in_features).double()
    scale = float(want_exact.abs().max())
    monkeypatch.delenv("KVSPILL_INT16_X", raising=False)  # the default: on
    on = _int16x(x, weight).cpu().double()
    monkeypatch.setenv("KVSPILL_INT16_X", "0")
    off = _int16x(x, weight).cpu().double()
    assert launched == ["q4k_int16x_kernel", "q4k_one_token_kernel"]
    torch.testing.assert_close(on, want_int16x, rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(off, want_exact, rtol=0, atol=1e-4 * scale)


def test_int16x_configs_cover_every_shape():
    # The table's last entry takes any weight; the 8B shapes get the entries swept for them.
    shapes = {
        "qkv": (6144, 4096),
        "o": (4096, 4096),
        "gate_up": (28672, 4096),
        "down": (4096, 14336),
        "lm_head": (128256, 4096),
        "1b_gate_up": (16384, 2048),
    }
    picked = {
        name: gguf_gemv._int16x_config(
            SimpleNamespace(qtype="Q4_K", out_features=n, in_features=k, split=False)
        )
        for name, (n, k) in shapes.items()
    }
    assert picked == {
        "qkv": (4096, 16, 4),
        "o": (4096, 8, 4),
        "gate_up": (2048, 8, 2),
        "down": (4096, 8, 4),
        "lm_head": (1024, 8, 1),
        "1b_gate_up": (2048, 8, 2),
    }
    tiny = SimpleNamespace(qtype="Q4_K", out_features=1, in_features=256, split=False)
    assert gguf_gemv._int16x_config(tiny) == (2048, 8, 2)


@pytest.mark.parametrize(
    "config", [(512, 2, 1), (512, 4, 1), (2048, 2, 4), (4096, 2, 4), (256, 8, 1), (2048, 1, 1), (2048, 4, 4)]
)
def test_q6k_int16x_kernel_matches_its_reference(config, device, monkeypatch):
    # 9 super-blocks: an odd count, and fewer than (4096, 2, 4)'s 16 side by side (lanes past the
    # end read block 0 and meet x = 0).
    monkeypatch.setattr(gguf_gemv, "Q6K_INT16X_CONFIGS", ((0, 0, config),))
    gen = torch.Generator().manual_seed(5)
    weight = random_quantized("Q6_K", ROWS, 9 * 256, gen).to(device)
    x = ((torch.randn((1, 9 * 256), generator=gen) * 4 + 1).to(torch.bfloat16)).to(device)
    x[0, 40:44] = 0  # an all-zero group of 4
    assert gguf_gemv._one_token_q6k_int16x(x, weight)
    out = torch.empty((1, ROWS), dtype=torch.float32, device=device)
    gguf_gemv._launch_lane_kernel(x, weight, None, out, gguf_gemv.FMA_CONFIG["Q6_K"])
    out = out.cpu()
    want = q6k_int16x_ref(x.cpu(), weight.data.cpu(), weight.in_features)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    exact = x.cpu().double() @ dequantize_ref(weight.data.cpu(), "Q6_K", weight.in_features).double().t()
    torch.testing.assert_close(out.double(), exact, rtol=0, atol=1e-4 * float(exact.abs().max()))


def test_q6k_int16x_configs_cover_every_shape(monkeypatch):
    # The timed shapes get their picks (many rows, or short rows of 2048 or more: the old default).
    shapes = {
        "lm_head": (128256, 4096),
        "1b_lm_head": (128256, 2048),
        "gate_up": (28672, 4096),
        "down": (4096, 14336),
        "v": (1024, 4096),
        "1b_down": (2048, 8192),
        "1b_qkv": (3072, 2048),
        "1b_v": (512, 2048),
    }
    picked = {
        name: gguf_gemv._int16x_config(
            SimpleNamespace(qtype="Q6_K", out_features=n, in_features=k, split=False)
        )
        for name, (n, k) in shapes.items()
    }
    assert picked == {
        "lm_head": (512, 2, 1),
        "1b_lm_head": (512, 4, 1),
        "gate_up": (512, 2, 1),
        "down": (2048, 2, 4),
        "v": (4096, 2, 4),
        "1b_down": (4096, 2, 4),
        "1b_qkv": (512, 2, 1),
        "1b_v": (2048, 2, 4),
    }
    # Split rows (QuantizedWeight.split): the 8B's down and v re-swept, the rest as gguf's layout.
    split_picked = {
        name: gguf_gemv._int16x_config(
            SimpleNamespace(qtype="Q6_K", out_features=n, in_features=k, split=True)
        )
        for name, (n, k) in shapes.items()
    }
    assert split_picked == {**picked, "down": (2048, 4, 4), "v": (2048, 1, 1)}
    # The launch: CHUNK // 256 blocks side by side, BLOCK_N rows a program.
    launched = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **meta: launched.append(
                (grid, meta["BLOCK_N"], meta["NB"], meta["num_warps"])
            )

    monkeypatch.setattr(gguf_gemv, "q6k_int16x_kernel", Recorder())
    weight = SimpleNamespace(
        qtype="Q6_K",
        out_features=4097,
        in_features=4096,
        data=torch.zeros((4097, 16 * 210), dtype=torch.uint8),
        split=False,
    )
    gguf_gemv._launch_q6k_int16x(
        torch.zeros((1, 4096), dtype=torch.bfloat16), weight, None, torch.empty((1, 4097))
    )
    assert launched == [((2049,), 2, 8, 4)]


def test_q6k_int16x_is_the_default_and_the_switch_turns_it_off(monkeypatch):
    weight = random_quantized("Q6_K", 4, 256)
    x = torch.zeros((1, 256), dtype=torch.bfloat16)
    assert gguf_gemv._one_token_q6k_int16x(x, weight)
    assert not gguf_gemv._one_token_q6k_int16x(x.float(), weight)  # fp32 x keeps the exact lanes
    monkeypatch.setenv("KVSPILL_INT16_X", "0")
    assert not gguf_gemv._one_token_q6k_int16x(x, weight)


@pytest.mark.parametrize("config", [(2048, 8, 2), (1024, 8, 1), (4096, 8, 4), (4096, 4, 2), (8192, 4, 4)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_q5k_takes_the_int16x_lanes_with_its_fifth_bit(config, dtype, device, monkeypatch):
    # Q5_K's quants are Q4_K's nibbles plus one bit each from qh: the same lanes, q <= 31. Random
    # blocks set every qh bit pattern; 9 super-blocks make the last K step read past the end.
    monkeypatch.delenv("KVSPILL_INT16_X", raising=False)
    monkeypatch.setattr(gguf_gemv, "Q5K_INT16X_CONFIGS", ((0, 0, config),))
    gen = torch.Generator().manual_seed(7)
    weight = random_quantized("Q5_K", ROWS, 9 * 256, gen).to(device)
    x = ((torch.randn((1, 9 * 256), generator=gen) * 4 + 1).to(dtype)).to(device)
    x[0, 64:96] = 0  # an all-zero sub-block
    bias = torch.randn((ROWS,), generator=gen).to(device)
    assert gguf_gemv._one_token_q5k_int16x(x, weight)
    got = torch.empty((1, ROWS), dtype=torch.float32, device=device)  # fp32: no output rounding
    gguf_gemv._launch_q4k_one_token(x, weight, bias, got)
    got = got.cpu()
    want = q4k_int16x_ref(x.cpu(), weight.data.cpu(), weight.in_features, "Q5_K") + bias.cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    exact = x.cpu().double() @ dequantize_ref(weight.data.cpu(), "Q5_K", weight.in_features).double().t()
    exact += bias.cpu().double()
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=1e-4 * float(exact.abs().max()))
    assert float((got.double() - exact).abs().max()) > 0  # x was rounded: not the generic kernel
    public = gguf_gemv.quant_matmul_gemv(x, weight, bias).cpu()  # the same kernel, stored in x's dtype
    torch.testing.assert_close(public.float(), got, rtol=2**-7, atol=0)  # within one bf16 step


def test_q5k_int16x_switch(device, monkeypatch):
    launched = _spy_on(monkeypatch, "q4k_int16x_kernel", "_gemv_fma_kernel")
    gen = torch.Generator().manual_seed(8)
    weight = random_quantized("Q5_K", ROWS, 2 * 256, gen).to(device)
    x = torch.randn((1, 2 * 256), generator=gen).to(torch.bfloat16).to(device)
    exact = x.cpu().double() @ dequantize_ref(weight.data.cpu(), "Q5_K", weight.in_features).double().t()
    runs = {}
    for value in ("1", "0"):
        monkeypatch.setenv("KVSPILL_INT16_X", value)
        runs[value] = gguf_gemv.quant_matmul_gemv(x.float(), weight).cpu().double()  # fp32 x: generic
        runs[value + "bf16"] = gguf_gemv.quant_matmul_gemv(x, weight).cpu().double()
    monkeypatch.setattr(gguf_gemv, "Q5K_INT16X", False)
    monkeypatch.setenv("KVSPILL_INT16_X", "1")
    gguf_gemv.quant_matmul_gemv(x, weight)
    assert launched == ["_gemv_fma_kernel", "q4k_int16x_kernel", "_gemv_fma_kernel", "_gemv_fma_kernel"] + [
        "_gemv_fma_kernel"
    ]
    scale = float(exact.abs().max())
    for got in runs.values():
        torch.testing.assert_close(got, exact, rtol=0, atol=2e-2 * scale)  # bf16 outputs


def test_q5k_int16x_configs_never_take_the_spilling_tile():
    # (4096, 16, 4) spills with Q5_K's qh words (sm_90); every shape gets a config of the table.
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096), (512, 256)):
        weight = SimpleNamespace(qtype="Q5_K", out_features=n, in_features=k, split=False)
        assert gguf_gemv._int16x_config(weight) in {c for _, _, c in gguf_gemv.Q5K_INT16X_CONFIGS}
        assert gguf_gemv._int16x_config(weight) != (4096, 16, 4)


@pytest.mark.parametrize("config", [(2048, 8, 2), (1024, 8, 1), (4096, 8, 4), (2048, 16, 4), (256, 4, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_q41_int16x_lanes_match_their_reference(config, dtype, device, monkeypatch):
    # Q4_1, what AWQ / GPTQ checkpoints load as: 41 blocks of 32, so every chunk's last K step reads
    # past the end; an all-zero block of x and an outlier in another.
    monkeypatch.setenv("KVSPILL_Q41_INT16X", "1")
    monkeypatch.setattr(gguf_gemv, "Q41_INT16X_CONFIGS", ((0, 0, config),))
    gen = torch.Generator().manual_seed(11)
    k = 41 * 32
    weight = random_quantized("Q4_1", ROWS, k, gen).to(device)
    x = ((torch.randn((1, k), generator=gen) * 4 + 1).to(dtype)).to(device)
    x[0, 64:96] = 0
    x[0, 200] = 300.0
    bias = torch.randn((ROWS,), generator=gen).to(device)
    assert gguf_gemv._one_token_q41_int16x(x, weight)
    got = torch.empty((1, ROWS), dtype=torch.float32, device=device)
    gguf_gemv._launch_block_lanes(x, weight, bias, got)
    got = got.cpu()
    want = q41_int16x_ref(x.cpu(), weight.data.cpu(), k) + bias.cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    exact = x.cpu().double() @ dequantize_ref(weight.data.cpu(), "Q4_1", k).double().t() + bias.cpu().double()
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=1e-4 * float(exact.abs().max()))
    assert float((got.double() - exact).abs().max()) > 0  # x was rounded: not the generic kernel
    public = gguf_gemv.quant_matmul_gemv(x, weight, bias).cpu()
    torch.testing.assert_close(public.float(), got, rtol=2**-7, atol=0)


def test_q41_int16x_is_the_default_and_switches_off(device, monkeypatch):
    launched = _spy_on(monkeypatch, "q41_int16x_kernel", "_gemv_fma_kernel")
    weight = random_quantized("Q4_1", ROWS, 256, torch.Generator().manual_seed(12)).to(device)
    x = torch.randn((1, 256), generator=torch.Generator().manual_seed(13)).to(torch.bfloat16).to(device)
    monkeypatch.delenv("KVSPILL_Q41_INT16X", raising=False)
    gguf_gemv.quant_matmul_gemv(x, weight)
    monkeypatch.setenv("KVSPILL_Q41_INT16X", "0")
    gguf_gemv.quant_matmul_gemv(x, weight)
    monkeypatch.setenv("KVSPILL_Q41_INT16X", "1")
    monkeypatch.setenv("KVSPILL_INT16_X", "0")  # the master switch turns it off too
    gguf_gemv.quant_matmul_gemv(x, weight)
    assert launched == ["q41_int16x_kernel", "_gemv_fma_kernel", "_gemv_fma_kernel"]
    monkeypatch.setenv("KVSPILL_Q41_INT16X", "yes")
    with pytest.raises(ValueError, match="KVSPILL_Q41_INT16X must be 0 or 1"):
        gguf_gemv.quant_matmul_gemv(x, weight)


@pytest.mark.parametrize("config", [(2048, 8, 4), (1024, 4, 2), (512, 16, 1), (128, 2, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_q80_int16x_lanes_match_their_reference(config, dtype, device, monkeypatch):
    # Q8_0: 42 blocks of 32 (21 pairs), so the last K step of most chunks reads past the end; an
    # all-zero block of x, an outlier, and the signed quants' extremes in the first row.
    monkeypatch.setenv("KVSPILL_Q80_INT16X", "1")
    monkeypatch.setattr(gguf_gemv, "Q80_INT16X_CONFIGS", ((0, 0, config),))
    gen = torch.Generator().manual_seed(21)
    k = 42 * 32
    weight = random_quantized("Q8_0", ROWS, k, gen)
    blocks = weight.data.view(ROWS, -1, 34)
    blocks[0, :, 2:18] = 0x80  # -128
    blocks[0, :, 18:34] = 0x7F  # 127
    weight = weight.to(device)
    x = ((torch.randn((1, k), generator=gen) * 4 + 1).to(dtype)).to(device)
    x[0, 64:96] = 0
    x[0, 200] = 300.0
    bias = torch.randn((ROWS,), generator=gen).to(device)
    assert gguf_gemv._one_token_q80_int16x(x, weight)
    got = torch.empty((1, ROWS), dtype=torch.float32, device=device)
    gguf_gemv._launch_block_lanes(x, weight, bias, got)
    got = got.cpu()
    want = q80_int16x_ref(x.cpu(), weight.data.cpu(), k) + bias.cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    exact = x.cpu().double() @ dequantize_ref(weight.data.cpu(), "Q8_0", k).double().t() + bias.cpu().double()
    # x's rounding (2**-15 of its 16 values' amax: the outlier's group) meets quants up to 127,
    # not Q4_1's 15: up to 1.2e-4 of the largest output here
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=2e-4 * float(exact.abs().max()))
    assert float((got.double() - exact).abs().max()) > 0  # x was rounded: not the generic kernel
    public = gguf_gemv.quant_matmul_gemv(x, weight, bias).cpu()
    torch.testing.assert_close(public.float(), got, rtol=2**-7, atol=0)


def test_q80_int16x_is_on_by_default_and_needs_whole_pairs(device, monkeypatch):
    # The lanes unless KVSPILL_Q80_INT16X=0; an odd block count (rows of 34 * odd bytes, not word
    # aligned) keeps the generic kernel either way.
    launched = _spy_on(monkeypatch, "q80_int16x_kernel", "_gemv_fma_kernel")
    gen = torch.Generator().manual_seed(22)
    weight = random_quantized("Q8_0", ROWS, 256, gen).to(device)
    odd = random_quantized("Q8_0", ROWS, 7 * 32, gen).to(device)
    x = torch.randn((1, 256), generator=gen).to(torch.bfloat16).to(device)
    monkeypatch.setenv("KVSPILL_Q80_INT16X", "0")
    gguf_gemv.quant_matmul_gemv(x, weight)
    monkeypatch.delenv("KVSPILL_Q80_INT16X", raising=False)
    gguf_gemv.quant_matmul_gemv(x, weight)
    gguf_gemv.quant_matmul_gemv(x[:, : 7 * 32].contiguous(), odd)
    monkeypatch.setenv("KVSPILL_INT16_X", "0")  # the master switch turns it off too
    gguf_gemv.quant_matmul_gemv(x, weight)
    assert launched == ["_gemv_fma_kernel", "q80_int16x_kernel", "_gemv_fma_kernel", "_gemv_fma_kernel"]


@pytest.mark.parametrize(
    ("qtype", "kernel"),
    [("Q4_1", "q41_int16x_kernel"), ("Q8_0", "q80_int16x_kernel"), ("Q5_K", "q4k_int16x_kernel")],
)
@pytest.mark.parametrize("per_pass", [2, 1])
def test_lane_passes_run_the_lanes_a_pass_per_two_tokens_or_one(qtype, kernel, per_pass, device, monkeypatch):
    # 2..N tokens take the int16-x lanes, a launch per two tokens (the kernels' TWO form; per
    # token with TWO_TOKEN_LANES emptied), each output row the same bits as that token alone, into
    # rows of a strided output. N: the type's LANE_PASSES_MAX_TOKENS, or KVSPILL_LANE_PASSES (0
    # off); past N the dot kernel.
    if per_pass == 1:
        monkeypatch.setattr(gguf_gemv, "TWO_TOKEN_LANES", ())
    launched = _spy_on(monkeypatch, kernel, "_gemv_dot_kernel")
    gen = torch.Generator().manual_seed(31)
    weight = random_quantized(qtype, ROWS, 512, gen).to(device)
    x = torch.randn((5, 512), generator=gen).to(torch.bfloat16).to(device)
    bias = torch.randn((ROWS,), generator=gen).to(torch.bfloat16).to(device)
    monkeypatch.setenv("KVSPILL_LANE_PASSES", "0")
    gguf_gemv.quant_matmul_gemv(x[:2], weight, bias)
    assert launched == ["_gemv_dot_kernel"]
    monkeypatch.delenv("KVSPILL_LANE_PASSES")
    limit = gguf_gemv.LANE_PASSES_MAX_TOKENS[qtype]
    for n in (limit, limit + 1):
        launched.clear()
        gguf_gemv.quant_matmul_gemv(x[:n], weight, bias)
        expected = [kernel] * -(-n // per_pass) if n == limit else ["_gemv_dot_kernel"]
        assert launched == expected, (n, launched)
    alone = torch.cat([gguf_gemv.quant_matmul_gemv(x[t : t + 1], weight, bias) for t in range(3)]).cpu()
    monkeypatch.setenv("KVSPILL_LANE_PASSES", "3")
    for n in (2, 3):
        launched.clear()
        wide = torch.zeros((n, ROWS + 5), dtype=torch.bfloat16, device=device)
        got = gguf_gemv.quant_matmul_gemv(x[:n], weight, bias, out=wide[:, :ROWS])
        assert launched == [kernel] * -(-n // per_pass)
        assert torch.equal(got.cpu(), alone[:n]) and not wide[:, ROWS:].any()
    exact = x[:3].cpu().double() @ dequantize_ref(weight.data.cpu(), qtype, 512).double().t()
    exact += bias.cpu().double()
    torch.testing.assert_close(got.cpu().double(), exact, rtol=0, atol=2e-2 * float(exact.abs().max()))
    launched.clear()
    gguf_gemv.quant_matmul_gemv(x[:4], weight, bias)  # 4 tokens: past N
    assert launched == ["_gemv_dot_kernel"]
    monkeypatch.setenv("KVSPILL_LANE_PASSES", "two")
    with pytest.raises(ValueError, match="KVSPILL_LANE_PASSES must be a token count"):
        gguf_gemv.quant_matmul_gemv(x[:2], weight, bias)


def test_q4k_lane_passes_take_two_tokens_and_match_one_token(device, monkeypatch):
    # Q4_K's 2 tokens take the integer-x lanes' TWO form (each output row the same bits as its
    # token alone); KVSPILL_LANE_PASSES=0 sends them to the float lanes (LANE_MULTI_CONFIG).
    launched = _spy_on(monkeypatch, "q4k_int16x_kernel", "q4k_gemv_kernel")
    gen = torch.Generator().manual_seed(41)
    weight = random_quantized("Q4_K", ROWS, 512, gen).to(device)
    x = torch.randn((2, 512), generator=gen).to(torch.bfloat16).to(device)
    monkeypatch.setenv("KVSPILL_LANE_PASSES", "0")
    gguf_gemv.quant_matmul_gemv(x, weight)
    assert launched == ["q4k_gemv_kernel"]
    alone = torch.cat([gguf_gemv.quant_matmul_gemv(x[t : t + 1], weight) for t in range(2)]).cpu()
    monkeypatch.delenv("KVSPILL_LANE_PASSES")
    launched.clear()
    got = gguf_gemv.quant_matmul_gemv(x, weight)
    assert launched == ["q4k_int16x_kernel"] and torch.equal(got.cpu(), alone)
