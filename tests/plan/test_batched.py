"""Decode of several sequences at once in the plan (plan/batched.py): the H200 rows it was fit to,
the one-sequence plan it extends, and where it declines to guess."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, make_plan
from kvspill.plan.batched import batched_decode
from kvspill.plan.report import format_plan_table
from kvspill.plan.spec import KNOWN_SHAPES
from kvspill.plan.weights import Q4_1_LANE_PASS_TOKENS

GiB = 2**30
# The H200 of the measured rows (its device copy, `hbm_copy_gbs` in their JSON lines).
H200 = replace(DEFAULT_BANDWIDTHS, hbm_gbs=4133.1, h2d_gbs=54.3, source="H200 rows")


def _plan(bandwidths=H200, **changes):
    base = dict(
        spec=KNOWN_SHAPES["llama-8b"],
        vram_budget_bytes=24 * GiB,
        context_len=2048,
        quantization="q4_k_m",
        max_num_seqs=32,
        gpu_memory_utilization=1.0,
    )
    return make_plan(PlanRequest(**{**base, **changes}), bandwidths)


# Random llama-8b:q4_k_m, N x 2K decoding together, tok/s in all (profile_decode), on one H200:
# with the Q4_K scale pairs the engine keeps for batched steps (2026-12-04-h200-scale-pairs), and
# with KVSPILL_SCALE_PAIRS=0 (the scales read from the blocks). The 8 and 32 rates are fit to the
# Q6_K split layout's rows (the default on CUDA since 2026-12-05: three calls, 2026-12-05-h200-q6k-split)
# and stay within 10% of the earlier rows in gguf's layout too; 32 to the row with decode attention's
# splits rounded down to one wave (its earlier rows, 3 splits, were 4,084-4,276: 9-13% slower).
@pytest.mark.parametrize(
    ("seqs", "measured", "pairs"),
    [
        (1, 406.0, True),  # split
        (8, 2130.9, True),  # split, call 1
        (8, 2104.7, True),  # split, call 7 (the default)
        (32, 4712.7, True),  # split, 2 attention splits (2026-12-05-h200-attn-splits, call 1)
        (1, 413.1, True),  # gguf's layout from here on
        (4, 1105.0, True),
        (8, 1993.0, True),
        (16, 3093.7, True),
        (8, 1786.7, False),
        (8, 1767.9, False),
        (32, 3788.8, False),
    ],
)
def test_q4_k_m_rows_within_the_issue_bar(seqs, measured, pairs):
    step = batched_decode(_plan(scale_pairs="on" if pairs else "off"), seqs)
    assert step is not None and step.num_seqs == seqs and step.context_len == 2048
    assert step.tok_s == pytest.approx(measured, rel=0.1)  # issue 54: the plan within 10% of every row


# The H100 of the Q5_K row (its device copy in the same call's JSON lines).
H100 = replace(DEFAULT_BANDWIDTHS, hbm_gbs=2885.1, h2d_gbs=54.9, source="H100 rows")


@pytest.mark.parametrize("measured", [541.3, 541.8])
def test_q4_k_m_two_tokens_within_the_issue_bar(measured):
    # random llama-8b:q4_k_m, 2 x 2K on an H100: the Q4_K lane passes (2026-12-06-h100-gated-down, call 25)
    step = batched_decode(_plan(H100), 2)
    assert step is not None and step.tok_s == pytest.approx(measured, rel=0.1)


@pytest.mark.parametrize(
    ("seqs", "measured"),
    [
        (2, 566.4),  # the lane passes
        (4, 628.1),
        (4, 628.7),
        (8, 1165.4),
        (8, 1171.1),
        (8, 1167.9),
        (16, 1789.0),
        (16, 1787.1),
        (32, 2491.6),
        (32, 2498.0),
    ],
)
def test_q5_k_rows_within_the_issue_bar(seqs, measured):
    # random llama-8b:q5_k, N x 2K on H100s, the lane passes at 2 tokens, the tensor-core sub-block
    # form at 3-32 (2026-12-05-h100-merge-defaults; 2026-12-05-h200-q41-configs, calls 17-18, 22-23)
    step = batched_decode(_plan(H100, quantization="q5_k"), seqs)
    assert step is not None and step.tok_s == pytest.approx(measured, rel=0.1)


def test_q5_k_declines_the_counts_its_kernel_does_not_take():
    plan = _plan(H100, quantization="q5_k")
    assert batched_decode(plan, 33) is None  # dequantize-then-GEMM: not fit
    assert batched_decode(plan, 3) is not None and batched_decode(plan, 12) is not None
    q5_k_m = _plan(H100, quantization="q5_k_m")
    assert batched_decode(q5_k_m, 8).tok_s < batched_decode(plan, 8).tok_s  # its Q6_K share


@pytest.mark.parametrize(
    ("seqs", "measured"),
    [(2, 595.4), (3, 491.6), (4, 649.7), (4, 650.2), (8, 728.0), (8, 724.5), (32, 1976.5), (32, 1966.8)],
)
def test_q4_1_rows_within_the_issue_bar(seqs, measured):
    # random llama-8b:q4_1 (what AWQ / GPTQ checkpoints run as), N x 2K on an H100: the lane passes
    # at 2-4 tokens, the tensor-core sub-block form at 8 and 32 (2026-12-05-h200-q41-configs, calls
    # 14, 22-24)
    step = batched_decode(_plan(H100, quantization="q4_1"), seqs)
    assert step is not None and step.tok_s == pytest.approx(measured, rel=0.1)
    assert batched_decode(_plan(H100, quantization="awq"), seqs) is not None  # the same kernels


def test_q4_1_declines_the_counts_its_kernel_does_not_take():
    plan = _plan(H100, quantization="q4_1")
    assert batched_decode(plan, 6).tok_s < batched_decode(plan, 8).tok_s  # 8's rate, fewer tokens
    assert batched_decode(plan, 9) is not None and batched_decode(plan, 33) is None
    odd = replace(KNOWN_SHAPES["llama-8b"], hidden_size=4096 + 32 * 18)  # rows of 32-weight blocks only
    assert batched_decode(_plan(H100, spec=odd, quantization="q4_1"), 8) is None
    assert batched_decode(_plan(H100, spec=odd, quantization="q4_1"), 4) is not None  # the lane passes


def test_q4_1_lane_pass_count_follows_the_kernels():
    gguf_gemv = pytest.importorskip("kvspill.kernels.gguf_gemv")
    assert Q4_1_LANE_PASS_TOKENS == gguf_gemv.LANE_PASSES_MAX_TOKENS["Q4_1"]


@pytest.mark.parametrize(("seqs", "measured"), [(2, 326.9), (3, 303.7), (4, 402.1), (4, 403.0)])
def test_q8_0_rows_within_the_issue_bar(seqs, measured):
    # random llama-8b:q8_0, N x 2K on an H100: the lane passes at 2 tokens, the dot kernel at 3-4
    # (2026-12-05-h200-q41-configs, calls 22-23); past 4 not measured: declined
    plan = _plan(H100, quantization="q8_0")
    step = batched_decode(plan, seqs)
    assert step is not None and step.tok_s == pytest.approx(measured, rel=0.1)
    assert batched_decode(plan, 5) is None


def test_scale_pairs_are_held_not_streamed():
    # 0.70 GiB more on the GPU for an 8B Q4_K_M; a one-token step streams the blocks alone
    with_pairs, without = _plan(), _plan(scale_pairs="off")
    assert with_pairs.request.scale_pairs == "auto"  # 2K fits the GPU beside them: kept
    assert with_pairs.weight_bytes - without.weight_bytes == with_pairs.request.scale_pair_bytes > 0.69 * GiB
    assert with_pairs.decode_tok_s == pytest.approx(without.decode_tok_s)
    assert with_pairs.gpu_kv_tokens < without.gpu_kv_tokens


def test_one_sequence_is_the_plans_own_step():
    plan = _plan(context_len=8192)
    assert batched_decode(plan, 1).tok_s == pytest.approx(plan.decode_tok_s)


def test_more_sequences_more_tokens_in_all_fewer_each():
    plan = _plan()
    rates = [batched_decode(plan, n).tok_s for n in (1, 4, 8, 16, 32)]
    assert rates == sorted(rates)
    each = [r / n for r, n in zip(rates, (1, 4, 8, 16, 32), strict=True)]
    assert each == sorted(each, reverse=True)


def test_no_guess_where_nothing_was_measured_or_the_sequences_spill():
    plan = _plan()
    assert batched_decode(plan, 33) is None  # past the largest measured token count
    assert batched_decode(_plan(quantization="none"), 8) is None  # dense: cuBLAS at 8 tokens, not fit
    assert batched_decode(_plan(quantization="q8_0"), 8) is None
    assert batched_decode(_plan(quantization="none"), 1) is not None
    small = _plan(vram_budget_bytes=8 * GiB)
    fits = small.gpu_kv_tokens // 2048
    assert batched_decode(small, fits) is not None and batched_decode(small, fits + 1) is None


def test_the_report_shows_max_seqs_in_all():
    table = format_plan_table([_plan(max_num_seqs=8)], with_advice=False)
    row = next(line for line in table.splitlines() if line.startswith("decode @ max seqs, in all"))
    assert "2,120 tok/s (8 x 265)" in row
    dense = format_plan_table([_plan(quantization="none", max_num_seqs=8)], with_advice=False)
    assert (
        next(line for line in dense.splitlines() if line.startswith("decode @ max seqs"))
        .rstrip()
        .endswith("-")
    )


def test_profile_decode_prints_the_sized_plan_at_its_batch():
    from kvspill.bench.plan_figures import batched_plan_tok_s

    plan = _plan(context_len=8192)  # sized at another context: the profile's is 2K
    assert batched_plan_tok_s(plan, 2048, 8) == pytest.approx(batched_decode(_plan(), 8).tok_s)
    assert batched_plan_tok_s(plan, 2048, 40) is None


def test_the_json_plan_carries_it():
    from kvspill.plan.report import plan_to_json

    data = plan_to_json(_plan(max_num_seqs=8))
    assert data["max_seqs_decode"]["num_seqs"] == 8
    assert data["max_seqs_decode"]["tok_s"] == pytest.approx(batched_decode(_plan(), 8).tok_s)
    assert plan_to_json(_plan(quantization="none", max_num_seqs=8))["max_seqs_decode"] is None


def test_auto_gives_the_scale_pairs_room_to_kv_where_the_context_spills():
    # 128K of an 8B in 16 GiB spills to RAM: the pairs' 0.70 GiB holds 5.7K more hot tokens instead
    long = _plan(vram_budget_bytes=16 * GiB, context_len=131072, ram_budget_bytes=64 * GiB)
    forced = _plan(
        vram_budget_bytes=16 * GiB, context_len=131072, ram_budget_bytes=64 * GiB, scale_pairs="on"
    )
    assert long.request.scale_pairs == "off" and long.request.scale_pair_bytes == 0
    assert forced.request.scale_pair_bytes > 0
    assert long.gpu_kv_tokens - forced.gpu_kv_tokens == pytest.approx(
        forced.request.scale_pair_bytes / long.kv_bytes_per_token, abs=16
    )
    # a fixed GPU KV size (--kv-cache-memory) the budget holds whole only without them
    fixed = dict(vram_budget_bytes=8 * GiB, context_len=2048, max_num_seqs=8)
    kv = _plan(**fixed, scale_pairs="off").gpu_kv_bytes - int(0.3 * GiB)  # 0.4 GiB short with pairs
    forced = _plan(**fixed, gpu_kv_budget_bytes=kv, scale_pairs="on")
    assert forced.gpu_kv_bytes < kv - 0.35 * GiB  # the pairs took from the KV asked for
    auto = _plan(**fixed, gpu_kv_budget_bytes=kv)
    assert auto.request.scale_pairs == "off" and auto.gpu_kv_bytes > kv - 0.01 * GiB
    roomy = _plan(**fixed, gpu_kv_budget_bytes=kv - GiB)  # the pairs fit beside it
    assert roomy.request.scale_pair_bytes > 0 and roomy.gpu_kv_bytes > kv - 1.01 * GiB
    # measured pairs (the engine attached them) are taken as they are
    loaded = _plan(
        vram_budget_bytes=16 * GiB,
        context_len=131072,
        measured_scale_pair_bytes=forced.request.scale_pair_bytes,
    )
    assert loaded.request.scale_pair_bytes == forced.request.scale_pair_bytes


def test_scale_pairs_mode_reads_the_switch(monkeypatch):
    from kvspill.env import scale_pairs_mode

    for value, mode in ((None, "auto"), ("1", "on"), ("0", "off")):
        if value is None:
            monkeypatch.delenv("KVSPILL_SCALE_PAIRS", raising=False)
        else:
            monkeypatch.setenv("KVSPILL_SCALE_PAIRS", value)
        assert scale_pairs_mode() == mode
    monkeypatch.setenv("KVSPILL_SCALE_PAIRS", "yes")
    with pytest.raises(ValueError, match="KVSPILL_SCALE_PAIRS must be 0, 1 or unset"):
        scale_pairs_mode()
