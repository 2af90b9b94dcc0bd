"""The memory plan's arithmetic, presets, advice, report formats and the `plan` command."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli.plan_cmd import register
from kvspill.config import EngineConfig
from kvspill.env import env_settings
from kvspill.errors import InvalidParameterError
from kvspill.plan import (
    DEFAULT_BANDWIDTHS,
    Bandwidths,
    PlanRequest,
    bandwidths_for_gpu,
    format_plan_table,
    make_plan,
    parse_bytes,
    plan_to_json,
    request_from_engine_config,
)
from kvspill.plan.calibrate import save_calibration
from kvspill.plan.cold_rates import (
    CPU_ATTN_OVERHEAD_PER_LAYER_S,
    EAGER_STREAM_HOST_PER_LAYER_S,
    GATHER_EFFICIENCY,
    SPLIT_EXTRA_PER_LAYER_S,
    STREAM_EFFICIENCY,
    auto_path_summary,
    auto_split_min_layer_bytes,
    auto_uses_split,
    graphed_split_min_layer_bytes,
)
from kvspill.plan.costs import decode_floor
from kvspill.plan.spec import KNOWN_SHAPES

GiB, MiB = 1 << 30, 1 << 20
LLAMA_8B = KNOWN_SHAPES["llama-8b"]


def test_parse_bytes() -> None:
    assert parse_bytes("16GiB") == 16 * GiB
    assert parse_bytes("24G") == 24 * GiB  # bare letters are binary, as docker and ls -h use them
    assert parse_bytes("512MiB") == 512 * MiB
    assert parse_bytes("1.5TB") == 1_500_000_000_000
    assert parse_bytes("2 gb") == 2_000_000_000
    assert parse_bytes("1024") == 1024 and parse_bytes(7) == 7
    for bad in ("", "GiB", "12 parsecs", "-1G", "1.2.3G"):
        with pytest.raises(InvalidParameterError, match="cannot read"):
            parse_bytes(bad, "--ram-budget")


def test_hand_computed_llama_8b_24gib_128k() -> None:
    """Llama-3.1-8B, 24 GiB VRAM at 0.9, 16 GiB CPU tier, 128K context, one sequence, no CUDA graphs.

    usable      = int(24 GiB * 0.9)                              = 23,192,823,398
    weights     = 8,030,261,248 params * 2 B                     = 16,060,522,496
    activations (T = 2048 tokens, h = 4096, I = 14336, q = 4096, kv = 1024, a = 2 B):
      residual  = 3 * T * h * a                                  =     50,331,648
      attention = T * (q + 2kv + q + kv + q) * a                 =     62,914,560
                + fp32 partials 2 * T * 32 heads * 129 * 4       =     67,633,152
                + cold staging 2 * 16384 * 2 * kv * 2 B          =    134,217,728
      mlp       = 4 * T * I * a = 234,881,024 < attention; logits (1 row) smaller still
      peak      = 50,331,648 + 264,765,440                       =    315,097,088
    slack       = 3% of usable                                   =    695,784,701
    runtime     = 640 MiB                                        =    671,088,640
    RoPE table  = 131,072 positions * 128 * 4 B (fp32)           =     67,108,864
    GPU KV left = 23,192,823,398 - 16,060,522,496 - 315,097,088 - 695,784,701 - 671,088,640
                  - 67,108,864
                = 5,383,221,609 -> 2566 blocks of 16 x 131,072 B (2 MiB) = 41,056 tokens
    CPU KV      = 16 GiB / 2 MiB = 8192 blocks = 131,072 tokens; max context 172,128
    placement   = gpu 41,056 + cpu 131,072 - 41,056 = 90,016
    decode (split, stream path at 25 GB/s beside CPU attention at 20 GB/s, whose part pays 0.45
            ms per layer on top: cold C = 90,016 * 131,072 = 11,798,577,152 B, c = C / 32 per layer;
            the CPU's share s = (c / 25e9 - 0.45e-3) / (c / 20e9 + c / 25e9) = 0.4308835 ends both
            parts together; the weights streamed are all but the untied token embedding,
            128,256 x 4096 x 2 B = 1,050,673,152, whose rows are gathered)
                = 15,009,849,344 / 900e9 + 41,056 * 131,072 / 900e9
                  + max(6,714,765,084 / 25e9, 5,083,812,068 / 20e9 + 32 * 0.45e-3)
                = 0.0166776 + 0.0059792 + max(0.2685906, 0.2685906) = 0.2912474 s
    """
    request = PlanRequest(
        spec=LLAMA_8B,
        vram_budget_bytes=24 * GiB,
        context_len=131072,
        ram_budget_bytes=16 * GiB,
        gpu_memory_utilization=0.9,
        max_num_seqs=1,
        enforce_eager=True,
        cold_attention="split",
    )
    plan = make_plan(request, replace(DEFAULT_BANDWIDTHS, stream_gbs=25.0))
    assert plan.usable_vram_bytes == 23_192_823_398
    assert plan.weight_bytes == 16_060_522_496 and plan.kv_bytes_per_token == 131_072
    assert plan.activation_peak_bytes == 315_097_088
    assert plan.cuda_graph_reserve_bytes == 0 and plan.allocator_slack_bytes == 695_784_701
    assert plan.runtime_reserve_bytes == 640 * MiB and plan.rope_table_bytes == 67_108_864
    assert plan.gpu_kv_tokens == 41_056 and plan.gpu_kv_bytes == 2566 * 2 * MiB
    assert plan.cpu_kv_tokens == 131_072 and plan.disk_kv_tokens == 0
    assert plan.max_context == 172_128 and plan.max_concurrent_seqs == 1
    assert (plan.placed_gpu_tokens, plan.placed_cpu_tokens, plan.placed_disk_tokens) == (41_056, 90_016, 0)
    assert plan.decode.weights_s == pytest.approx(15_009_849_344 / 900e9)
    assert plan.decode.cold_kv_s == pytest.approx(5_083_812_068 / 20e9 + 32 * 0.45e-3)
    assert plan.decode.cold_kv_s == pytest.approx(6_714_765_084 / 25e9)
    # 32 layers x (the per-layer step overhead + what an eager split step adds per layer)
    assert plan.decode.overhead_s == pytest.approx(32 * (22e-6 + 0.7e-3))
    assert plan.decode.total_s == pytest.approx(0.2912474 + 32 * (22e-6 + 0.7e-3), rel=1e-6)
    assert plan.decode_tok_s == pytest.approx(3.181, abs=1e-3)
    assert plan.decode.stream_fraction == pytest.approx(1 - 0.4308835, abs=1e-6)
    assert plan.fits and plan.advice == []


def test_prefill_one_chunk_by_hand() -> None:
    """2048 tokens in one chunk, all on the GPU: compute-bound.

    linear: 2 FLOPs x 32 layers x 218,103,808 matmul params = 13,958,643,712 per token
    attention: 4 x 32 layers x 32 heads x 128 = 524,288 FLOPs per (query, key) pair, 2048*2049/2
    pairs, at 0.37 of the matmul rate with bf16 KV (0.30 fp8, 0.20 int8: PREFILL_ATTENTION_SHARE)
    lm_head: 2 x 4096 x 128256 for the last row; matmuls at 100 TFLOP/s (weights read 17.8 ms is less).
    """
    request = PlanRequest(spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=2048)
    plan = make_plan(request, DEFAULT_BANDWIDTHS)
    matmul = 13_958_643_712 * 2048 + 2 * 4096 * 128256
    pairs = 524_288 * (2048 * 2049 // 2)
    assert plan.ttft_s == pytest.approx(matmul / 100e12 + pairs / (0.37 * 100e12))
    assert plan.placed_gpu_tokens == 2048 and plan.decode.cold_kv_s == 0
    for kv, share in (("fp8", 0.30), ("int8", 0.20)):
        quantized = make_plan(replace(request, kv_dtype=kv), DEFAULT_BANDWIDTHS)
        assert quantized.ttft_s == pytest.approx(matmul / 100e12 + pairs / (share * 100e12))
    # The CPU engine attends with other kernels: its pairs go at the matmul rate
    cpu = make_plan(replace(request, device="cpu"), DEFAULT_BANDWIDTHS)
    assert cpu.ttft_s == pytest.approx((matmul + pairs) / 100e12)


def test_cold_split_is_the_optimum() -> None:
    floor = decode_floor(0, 0, 10**10, 0, DEFAULT_BANDWIDTHS, "split")
    h2d, cpu = DEFAULT_BANDWIDTHS.h2d_gbs, DEFAULT_BANDWIDTHS.cpu_attn_gbs
    assert h2d is not None and cpu is not None
    stream = STREAM_EFFICIENCY * h2d  # no calibrated stream rate in the defaults
    brute = min(
        max(f / 1000 * 10**10 / (stream * 1e9), (1 - f / 1000) * 10**10 / (cpu * 1e9)) for f in range(1001)
    )
    assert floor.cold_kv_s == pytest.approx(brute, rel=1e-3)
    assert floor.streamed_bytes + floor.cpu_attn_bytes == 10**10
    # with the CPU part's fixed time per layer (32 layers): still the best share
    floor = decode_floor(0, 0, 10**10, 0, DEFAULT_BANDWIDTHS, "split", 32)
    fixed = 32 * CPU_ATTN_OVERHEAD_PER_LAYER_S
    brute = min(
        max(
            f / 1000 * 10**10 / (stream * 1e9),
            (1 - f / 1000) * 10**10 / (cpu * 1e9) + (fixed if f < 1000 else 0),
        )
        for f in range(1001)
    )
    assert floor.cold_kv_s == pytest.approx(brute, rel=1e-3)


def test_cold_path_follows_the_engine() -> None:
    """The default (stream) path pays cold KV at the stream rate alone; cpu at the CPU rate, plus
    its fixed time per layer, which split's CPU share pays too."""
    bw = replace(DEFAULT_BANDWIDTHS, stream_gbs=40.0, cpu_attn_gbs=10.0)
    assert decode_floor(0, 0, 4 * 10**10, 0, bw).cold_kv_s == pytest.approx(1.0)
    assert decode_floor(0, 0, 4 * 10**10, 0, bw, "cpu").cold_kv_s == pytest.approx(4.0)
    assert decode_floor(0, 0, 4 * 10**10, 0, bw, "split").cold_kv_s == pytest.approx(0.8)
    layers = 32 * CPU_ATTN_OVERHEAD_PER_LAYER_S
    assert decode_floor(0, 0, 4 * 10**10, 0, bw, "cpu", 32).cold_kv_s == pytest.approx(4.0 + layers)
    split = decode_floor(0, 0, 4 * 10**10, 0, bw, "split", 32)
    share = split.cpu_attn_bytes / (4 * 10**10)  # less than the rates' 1/5: the CPU part pays `layers`
    assert 0.19 < share < 0.2 and split.cold_kv_s < 0.8 + layers
    assert split.cold_kv_s == pytest.approx(4.0 * share + layers) == pytest.approx(1.0 * (1 - share))
    assert decode_floor(0, 0, 4 * 10**10, 0, bw, "stream", 32).cold_kv_s == pytest.approx(1.0)
    assert decode_floor(0, 0, 0, 0, bw, "cpu", 32).cold_kv_s == 0.0  # no cold KV, no hand-over


def test_auto_splits_only_where_a_calibration_says_the_cpu_pays_and_the_step_is_big() -> None:
    """ "auto" on a GPU: split with a calibration whose CPU rate is at least half the stream's,
    for cold KV of at least a millisecond of streaming per layer; else stream (as the engine)."""
    calibrated = replace(
        DEFAULT_BANDWIDTHS, stream_gbs=40.0, cpu_attn_gbs=30.0, measured_at="2026-11-27T13:43:42+00:00"
    )
    assert auto_uses_split(calibrated)
    assert auto_split_min_layer_bytes(calibrated) == 40_000_000  # 1 ms at 40 GB/s
    big = 32 * 10**9  # 1 GB per layer over 32 layers
    assert decode_floor(0, 0, big, 0, calibrated, "auto", 32) == decode_floor(
        0, 0, big, 0, calibrated, "split", 32
    )
    small = 32 * 10**7  # 10 MB per layer: the hand-over would cost more than the CPU's share saves
    assert decode_floor(0, 0, small, 0, calibrated, "auto", 32) == decode_floor(
        0, 0, small, 0, calibrated, "stream", 32
    )
    for bw in (
        replace(calibrated, cpu_attn_gbs=19.0),  # the CPU under half the stream's rate
        replace(calibrated, measured_at=None),  # defaults, not a measurement of this host
        replace(calibrated, stream_gbs=None),  # a calibration without a GPU
    ):
        assert not auto_uses_split(bw)
        assert decode_floor(0, 0, big, 0, bw, "auto", 32) == decode_floor(0, 0, big, 0, bw, "stream", 32)


def test_a_stream_step_under_a_graph_gathers_beneath_the_hbm_work() -> None:
    """`cold_graphs`: all cold blocks streamed by the graph's gather (GATHER_EFFICIENCY x H2D),
    the weights and gpu KV read beneath it; eager, the same step is at least the host's launches."""
    bw = replace(DEFAULT_BANDWIDTHS, hbm_gbs=4000.0, h2d_gbs=50.0, stream_gbs=40.0)
    weights, hot, cold = 16 * 10**9, 8 * 10**9, 4 * 10**9  # 4 + 2 ms of HBM, 4 GB cold
    graphed = decode_floor(weights, hot, cold, 0, bw, "stream", 32, cold_graphs=True)
    assert graphed.cold_graphs
    assert graphed.cold_kv_s == pytest.approx(4.0 / (GATHER_EFFICIENCY * 50.0))
    assert graphed.overlap_s == pytest.approx(6e-3)  # the hbm part, shorter than the gather
    assert graphed.total_s == pytest.approx(graphed.cold_kv_s + 32 * 22e-6)
    eager = decode_floor(weights, hot, cold, 0, bw, "stream", 32)
    assert not eager.cold_graphs and eager.overlap_s == 0.0
    assert eager.cold_kv_s == pytest.approx(4.0 / 40.0)  # the stream path's calibrated rate
    assert eager.total_s == pytest.approx(6e-3 + 4.0 / 40.0 + 32 * 22e-6)  # bytes outlast the launches
    small = decode_floor(weights, hot, 10**8, 0, bw, "stream", 32)  # 8.5 ms of bytes: launch-bound
    assert small.total_s == pytest.approx(32 * EAGER_STREAM_HOST_PER_LAYER_S)
    # disk blocks never replay a graph
    assert not decode_floor(weights, hot, cold, 10**6, bw, "stream", 32, cold_graphs=True).cold_graphs
    split = decode_floor(weights, hot, cold, 0, bw, "split", 32, cold_graphs=True)
    assert not split.cold_graphs and split.overhead_s == pytest.approx(
        32 * (22e-6 + SPLIT_EXTRA_PER_LAYER_S["bf16"])
    )


def test_auto_splits_a_graphable_step_only_where_split_beats_the_graph() -> None:
    """Where the step could replay a stream graph, split must beat c / B_gather per layer:
    (c + B_cpu t) / (B_stream + B_cpu) + SPLIT_EXTRA_PER_LAYER_S[format] = c / B_gather."""
    bw = replace(
        DEFAULT_BANDWIDTHS,
        h2d_gbs=55.3,
        stream_gbs=43.6,
        cpu_attn_gbs=65.2,
        cpu_attn_layer_s=0.49e-3,
        measured_at="2026-11-27T19:14:09+00:00",
    )
    gather, both = GATHER_EFFICIENCY * 55.3e9, (43.6 + 65.2) * 1e9
    least = graphed_split_min_layer_bytes(bw, 65.2, 0.49e-3)
    fixed = 65.2e9 * 0.49e-3 / both + SPLIT_EXTRA_PER_LAYER_S["bf16"]
    assert least == round(fixed / (1 / gather - 1 / both))
    assert 90e6 < least < 100e6  # ~23K cold tokens of W3 at bf16
    assert least > auto_split_min_layer_bytes(bw)  # eager steps split from 1 ms of streaming
    below, above = 32 * (least - 10**6), 32 * (least + 10**6)
    assert decode_floor(0, 0, below, 0, bw, "auto", 32, cold_graphs=True) == decode_floor(
        0, 0, below, 0, bw, "stream", 32, cold_graphs=True
    )
    assert decode_floor(0, 0, above, 0, bw, "auto", 32, cold_graphs=True) == decode_floor(
        0, 0, above, 0, bw, "split", 32
    )
    assert decode_floor(0, 0, below, 0, bw, "auto", 32) == decode_floor(0, 0, below, 0, bw, "split", 32)
    # the two paths' times cross at `least` (the graph's HBM work is beneath its gather)
    at = decode_floor(0, 0, 32 * least, 0, bw, "stream", 32, cold_graphs=True).total_s
    assert decode_floor(0, 0, 32 * least, 0, bw, "split", 32).total_s == pytest.approx(at, rel=1e-3)
    assert graphed_split_min_layer_bytes(replace(bw, h2d_gbs=200.0), 65.2, 0.49e-3) == float("inf")
    # fp8's split pays more per layer (SPLIT_EXTRA_PER_LAYER_S): it starts later at the same rates
    assert graphed_split_min_layer_bytes(bw, 65.2, 0.49e-3, "fp8") > least
    fp8 = decode_floor(0, 0, above, 0, bw, "split", 32, kv_format="fp8")
    assert fp8.overhead_s == pytest.approx(32 * (22e-6 + SPLIT_EXTRA_PER_LAYER_S["fp8"]))


def test_doctor_says_what_auto_does_on_the_calibrated_host() -> None:
    calibrated = replace(DEFAULT_BANDWIDTHS, stream_gbs=42.7, cpu_attn_gbs=43.8, measured_at="2026-11-27")
    assert auto_path_summary(calibrated) == (
        "--cold-attention auto: split (the CPU path attends cold KV at 1.03x the stream path's rate; "
        "steps with under 43 MB of cold KV per layer stream it all, and under 43 MB (bf16 KV) where the "
        "step could replay a stream graph)"
    )
    h200 = replace(calibrated, h2d_gbs=55.3, stream_gbs=43.6, cpu_attn_gbs=65.2, cpu_attn_layer_s=0.49e-3)
    assert auto_path_summary(h200).endswith(
        "and under 95 MB (bf16 KV) where the step could replay a stream graph)"
    )
    assert "every step that could replay a stream graph streams" in auto_path_summary(
        replace(h200, cpu_attn_gbs=22.0, h2d_gbs=80.0)  # the gather outruns both paths together
    )
    slow_cpu = replace(calibrated, cpu_attn_gbs=12.0)
    assert auto_path_summary(slow_cpu) == (
        "--cold-attention auto: stream (the CPU path attends cold KV at 0.28x the stream path's rate; "
        "auto splits from 0.5x)"
    )
    assert auto_path_summary(replace(calibrated, stream_gbs=None)) is None  # no GPU: no line


def test_does_not_fit_gives_numbers() -> None:
    request = PlanRequest(
        spec=LLAMA_8B,
        vram_budget_bytes=24 * GiB,
        context_len=1 << 20,
        ram_budget_bytes=16 * GiB,
        gpu_memory_utilization=0.9,
        max_num_seqs=1,
        enforce_eager=True,
    )
    plan = make_plan(request, DEFAULT_BANDWIDTHS)
    # The GPU holds 37,472 tokens: 41,056 at 128K (test_hand_computed_llama_8b_24gib_128k) less
    # the RoPE table's growth to 1M positions (448 MiB = 224 blocks of 2 MiB).
    assert plan.gpu_kv_tokens == 37_472 and plan.rope_table_bytes == 512 * MiB
    assert not plan.fits and plan.unplaced_tokens == (1 << 20) - 168_544
    text = "\n".join(plan.advice)
    assert "max context that fits now: 168544 tokens" in text
    # RAM for every token beyond the GPU's: 1,011,104 tokens / 8192 per GiB = 123.43 GiB, up to 123.5
    assert "--cpu-kv-budget 123.5GiB" in text
    # disk for what GPU and RAM cannot hold: 880,032 tokens / 8192 per GiB = 107.43 GiB, up to 107.5
    assert "--disk-kv-budget 107.5GiB" in text
    assert "--kv-cache-dtype fp8" in text and "64.0 KiB per token" in text
    for flag, field in (("123.5GiB", "ram_budget_bytes"), ("107.5GiB", "disk_budget_bytes")):
        assert make_plan(replace(request, **{field: parse_bytes(flag)}), DEFAULT_BANDWIDTHS).fits


def test_weights_too_big_for_the_card() -> None:
    plan = make_plan(
        PlanRequest(spec=LLAMA_8B, vram_budget_bytes=8 * GiB, context_len=8192), DEFAULT_BANDWIDTHS
    )
    assert not plan.fits
    text = "\n".join(plan.advice)
    assert "weights alone (15.0 GiB) exceed the VRAM budget (8.0 GiB)" in text
    assert "--vram-budget" in text


def test_gpu_advice_numbers_make_it_fit() -> None:
    # 18 GiB at 0.75: 13.5 GiB usable cannot hold 15 GiB of weights; the suggested flags can.
    request = PlanRequest(
        spec=LLAMA_8B, vram_budget_bytes=18 * GiB, context_len=131072, ram_budget_bytes=32 * GiB
    )
    plan = make_plan(request, DEFAULT_BANDWIDTHS)
    assert not plan.fits
    text = "\n".join(plan.advice)
    budget = re.search(r"--vram-budget (\S+)", text)
    utilization = re.search(r"--gpu-memory-utilization (\S+)", text)
    assert budget and utilization, text
    assert make_plan(
        replace(request, vram_budget_bytes=parse_bytes(budget.group(1))), DEFAULT_BANDWIDTHS
    ).fits
    assert make_plan(
        replace(request, gpu_memory_utilization=float(utilization.group(1))), DEFAULT_BANDWIDTHS
    ).fits


def test_activations_too_big_suggest_smaller_chunks() -> None:
    # 1B model on a tight card: a 64K-token chunk's activations leave no room for the hot set.
    spec = KNOWN_SHAPES["llama-1b"]
    request = PlanRequest(
        spec=spec,
        vram_budget_bytes=5 * GiB,
        context_len=131072,
        ram_budget_bytes=8 * GiB,
        max_num_batched_tokens=65536,
        gpu_memory_utilization=0.9,
    )
    plan = make_plan(request, DEFAULT_BANDWIDTHS)
    assert not plan.fits
    chunk_lines = [a for a in plan.advice if a.startswith("--max-num-batched-tokens")]
    assert chunk_lines, plan.advice
    chunk = int(chunk_lines[0].split()[1].rstrip(":"))
    assert make_plan(replace(request, max_num_batched_tokens=chunk), DEFAULT_BANDWIDTHS).fits


def test_fp8_halves_kv_and_fixed_gpu_kv() -> None:
    base = PlanRequest(spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=65536)
    fp8 = make_plan(replace(base, kv_dtype="fp8"), DEFAULT_BANDWIDTHS)
    bf16 = make_plan(base, DEFAULT_BANDWIDTHS)
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.gpu_kv_tokens >= 2 * bf16.gpu_kv_tokens - 16
    # 26 GiB: room for more than the fixed 1 GiB beside the bf16 weights and a 64-sequence step
    fixed = make_plan(replace(base, gpu_kv_budget_bytes=GiB, vram_budget_bytes=26 * GiB), DEFAULT_BANDWIDTHS)
    assert fixed.gpu_kv_bytes == GiB and fixed.gpu_kv_tokens == 8192
    with pytest.raises(InvalidParameterError, match="--kv-dtype"):
        replace(base, kv_dtype="int3")


def test_int8_kv_counts_its_scales() -> None:
    """int8 rows hold head_dim values and a 4-byte scale (kernels/kv_quant.py): 132 of bf16's 256
    bytes per (layer, K or V, kv head) for Llama-3.1-8B, as the engine's KVLayout counts them."""
    base = PlanRequest(spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=65536)
    int8 = make_plan(replace(base, kv_dtype="int8"), DEFAULT_BANDWIDTHS)
    bf16 = make_plan(base, DEFAULT_BANDWIDTHS)
    assert int8.kv_bytes_per_token * 256 == bf16.kv_bytes_per_token * 132
    assert int8.kv_bytes_per_token == 32 * 2 * 8 * (128 + 4)
    assert int8.gpu_kv_tokens >= 1.9 * bf16.gpu_kv_tokens
    assert "int8 + scales" in format_plan_table([int8])


def test_decode_over_quantized_gpu_kv_takes_bf16s_time_and_int8_its_basis_turns() -> None:
    """fp8 and int8 KV in the gpu tier: a CUDA decode step's KV time follows bf16's bytes
    (costs.KV_DECODE_READS_AS_BF16, fit on H200s) and int8 adds its Hadamard turns, 34 us per
    layer; the CPU engine's plan keeps the stored bytes."""
    base = PlanRequest(spec=LLAMA_8B, vram_budget_bytes=40 * GiB, context_len=32768)
    plans = {kv: make_plan(replace(base, kv_dtype=kv), DEFAULT_BANDWIDTHS) for kv in ("auto", "fp8", "int8")}
    assert all(plan.placed_gpu_tokens == 32768 for plan in plans.values())
    bf16 = plans["auto"].decode
    assert plans["fp8"].decode.gpu_kv_s == pytest.approx(bf16.gpu_kv_s)
    assert plans["int8"].decode.gpu_kv_s == pytest.approx(bf16.gpu_kv_s)
    assert plans["fp8"].decode.overhead_s == pytest.approx(bf16.overhead_s)
    assert plans["int8"].decode.overhead_s == pytest.approx(bf16.overhead_s + 32 * 34e-6)
    on_cpu = {
        kv: make_plan(replace(base, kv_dtype=kv, device="cpu"), DEFAULT_BANDWIDTHS) for kv in ("auto", "fp8")
    }
    assert on_cpu["fp8"].decode.gpu_kv_s == pytest.approx(on_cpu["auto"].decode.gpu_kv_s / 2)


def test_request_from_engine_config() -> None:
    config = EngineConfig(max_model_len=65536, max_num_seqs=4, kv_cache_memory_bytes=GiB, enforce_eager=True)
    request = request_from_engine_config(config, LLAMA_8B, 24 * GiB, ram_budget_bytes=8 * GiB)
    assert (request.context_len, request.max_num_seqs, request.gpu_memory_utilization) == (65536, 4, 0.9)
    plan = make_plan(request, DEFAULT_BANDWIDTHS)
    assert plan.gpu_kv_bytes == GiB and plan.cuda_graph_reserve_bytes == 0 and plan.fits


def test_bandwidths_fill_and_known_cards() -> None:
    assert bandwidths_for_gpu("NVIDIA H100 80GB HBM3").hbm_gbs == 3000.0
    assert bandwidths_for_gpu("NVIDIA H200").hbm_gbs == 4300.0
    assert bandwidths_for_gpu("Some Future Card") is DEFAULT_BANDWIDTHS
    cpu_only = Bandwidths(cpu_attn_gbs=7.0, disk_read_gbs=1.0, source="calibration x 2026-11-26")
    full = cpu_only.complete(DEFAULT_BANDWIDTHS)
    assert full.cpu_attn_gbs == 7.0 and full.hbm_gbs == DEFAULT_BANDWIDTHS.hbm_gbs
    assert "hbm_gbs" in full.source and "calibrate" in full.source
    plan = make_plan(PlanRequest(spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=1024), cpu_only)
    assert plan.bandwidths.hbm_gbs == DEFAULT_BANDWIDTHS.hbm_gbs


def test_table_and_json() -> None:
    base = PlanRequest(spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=131072)
    plans = {
        name: make_plan(replace(base, preset=name, ram_budget_bytes=ram), DEFAULT_BANDWIDTHS)
        for name, ram in (("default", 8 * GiB), ("extended", 32 * GiB), ("extreme", 48 * GiB), ("yours", 0))
    }
    table = format_plan_table(plans)
    for word in (
        "default",
        "extended",
        "extreme",
        "yours",
        "KV per token",
        "128 KiB",
        "decode @ context",
        "128K",
        "fits",
    ):
        assert word in table
    data = json.loads(json.dumps(plan_to_json(plans["default"])))
    assert data["kv_bytes_per_token"] == 131072 and data["request"]["spec"]["num_params"] == 8_030_261_248
    assert data["decode"]["total_s"] == pytest.approx(1 / data["decode_tok_s"])


# -- the `plan` command -------------------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("KVSPILL_CALIBRATION", str(tmp_path / "calibration.json"))
    env_settings.cache_clear()
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # two commands: `plan` stays a subcommand, as in the real CLI
    yield app
    env_settings.cache_clear()


def test_cli_table(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["plan", "llama-1b", "--vram-budget", "16GiB", "--context", "32K"])
    assert result.exit_code == 0, result.output
    assert "default" in result.output and "yours" in result.output and "KV per token" in result.output
    assert "kvspill doctor --calibrate" in result.output


def test_cli_plans_a_registry_name(cli: typer.Typer, tmp_path: Path, monkeypatch) -> None:
    """`kvspill plan NAME` plans a registered model's files (the embedded model by its name), as
    generate and serve take NAME; a name that is nothing here still says what MODEL may be."""
    from kvspill.plan import flag_plans
    from kvspill.registry import open_registry
    from kvspill.registry.store import ModelEntry

    # every plan reads the host's available RAM: one reading for all, or they differ by the drift
    room = flag_plans.HostRoom(20 * 2**30, 100 * 2**30)
    monkeypatch.setattr(flag_plans, "read_host_room", lambda kv_disk_dir=None: room)
    monkeypatch.setenv("KVSPILL_DATA_DIR", str(tmp_path))
    env_settings.cache_clear()
    embedded = CliRunner().invoke(cli, ["plan", "SmolLM2-135M-Instruct", "--json"])
    assert embedded.exit_code == 0, embedded.output
    default = CliRunner().invoke(cli, ["plan", "--json"])
    assert json.loads(embedded.output)["plans"] == json.loads(default.output)["plans"]
    open_registry(tmp_path).add_model(ModelEntry("one-b", "llama-1b", "shape", "shape", None, 0, 0.0))
    named = CliRunner().invoke(cli, ["plan", "one-b", "--vram-budget", "16GiB", "--json"])
    by_shape = CliRunner().invoke(cli, ["plan", "llama-1b", "--vram-budget", "16GiB", "--json"])
    assert named.exit_code == by_shape.exit_code == 0, named.output
    assert json.loads(named.output)["plans"] == json.loads(by_shape.output)["plans"]
    unknown = CliRunner().invoke(cli, ["plan", "org/not-here"])
    assert unknown.exit_code == 2 and "is not a local directory" in unknown.output


def test_cli_says_what_serve_would_refuse_on_this_host(cli: typer.Typer) -> None:
    """A cpu tier past this host's RAM plans (any host's plan) but serve refuses it: plan says so
    and exits 1; with --gpu (another machine's figures) the host is not checked."""
    args = ["plan", "llama-1b", "--vram-budget", "16GiB", "--cpu-kv-budget", "99999GiB"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "serve would refuse on this host: --cpu-kv-budget" in result.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert "of RAM available" in data["host_refusals"][0]
    other_host = CliRunner().invoke(cli, [*args, "--gpu", "h100", "--json"])
    assert json.loads(other_host.output)["host_refusals"] == []


def test_cli_json_uses_calibration(cli: typer.Typer) -> None:
    calibration = Bandwidths(
        hbm_gbs=1000.0,
        h2d_gbs=20.0,
        d2h_gbs=20.0,
        cpu_attn_gbs=10.0,
        disk_read_gbs=2.0,
        gpu_tflops=50.0,
        gpu_name="Test Card",
        gpu_total_bytes=12 * GiB,
        measured_at="2026-11-26T00:00:00+00:00",
    )
    save_calibration(calibration, env_settings().calibration_path)
    result = CliRunner().invoke(cli, ["plan", "llama-1b", "--context", "8192", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["vram_budget_bytes"] == 12 * GiB and data["fits"] is True
    assert data["bandwidths_source"].startswith("calibration ")
    assert set(data["plans"]) == {"default", "extended", "extreme", "yours"}
    assert data["plans"]["yours"]["bandwidths"]["hbm_gbs"] == 1000.0


def test_cli_does_not_fit_exits_1_with_advice(cli: typer.Typer) -> None:
    args = ["plan", "llama-8b", "--vram-budget", "24GiB", "--context", "1M", "--ram-budget", "16GiB"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert (
        "do not fit" in result.output
        and "--cpu-kv-budget" in result.output
        and "--kv-cache-dtype fp8" in result.output
    )
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["fits"] is False and any("max context" in a for a in data["plans"]["yours"]["advice"])


def test_cli_bad_input_exits_2(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["plan", "llama-8b", "--vram-budget", "lots"])
    assert result.exit_code == 2 and "cannot read" in result.output


def test_the_engines_plan_uses_the_whole_vram_budget_as_the_engine_does():
    """With --vram-budget the engine sizes its pool from the budget itself (plan/startup.py);
    --gpu-memory-utilization applies to the card only without one. The start-up plan agrees."""
    from kvspill.config import EngineConfig
    from kvspill.plan.startup import startup_plan

    gib = 2**30
    budget = startup_plan(
        EngineConfig(
            model="random:llama-8b",
            vram_budget_bytes=24 * gib,
            max_model_len=32768,
            gpu_memory_utilization=0.5,
        ),
        141 * gib,
        "NVIDIA H200",
    )
    assert budget is not None and budget.plan.usable_vram_bytes == 24 * gib
    card = startup_plan(
        EngineConfig(model="random:llama-8b", max_model_len=32768, gpu_memory_utilization=0.5),
        141 * gib,
        "NVIDIA H200",
    )
    assert card is not None and card.plan.usable_vram_bytes == int(141 * gib * 0.5)


def test_plan_cli_counts_the_sparse_block_cache_as_the_engine_does(cli: typer.Typer) -> None:
    """`kvspill plan --cold-attention sparse` plans the engine's default block cache (one
    sequence: graphs on) and says when steps would run eagerly (--sparse-cache-seqs 0)."""
    args = ["plan", "llama-8b", "--vram-budget", "24GiB", "--gpu-memory-utilization", "0.95"]
    args += ["--cpu-kv-budget", "18GiB", "--context", "128K", "--cold-attention", "sparse"]
    default = CliRunner().invoke(cli, args)
    assert default.exit_code == 0, default.output
    assert "1 sequence(s) keep their chosen blocks cached there (512 MiB" in default.output
    assert "without CUDA graphs" not in default.output
    off = CliRunner().invoke(cli, [*args, "--sparse-cache-seqs", "0"])
    assert off.exit_code == 0, off.output
    assert "without CUDA graphs (--sparse-cache-seqs 0)" in off.output


def test_attention_cpu_on_a_gpu_keeps_the_kv_in_the_cpu_tier() -> None:
    """--attention cpu on a GPU (config.with_attention_mode): the gpu tier holds each sequence's
    sinks and newest blocks plus one prefill chunk; the KV lives in a cpu tier sized like the cpu
    device's pool (or --cpu-kv-budget); decode attention over it runs on the CPU."""
    from kvspill.config import cpu_attention_gpu_blocks, with_attention_mode
    from kvspill.plan.startup import startup_plan

    gib = 2**30
    config = EngineConfig(
        model="random:llama-1b",
        attention="cpu",
        max_model_len=131072,
        max_num_seqs=4,
        max_num_batched_tokens=4096,
    )
    resolved = with_attention_mode(config, "cuda")
    assert (resolved.cold_attention, resolved.hot_window_tokens) == ("cpu", 16)
    assert resolved.num_kv_blocks == cpu_attention_gpu_blocks(config) == 4 * (1 + 2) + 256 + 2
    assert with_attention_mode(resolved, "cuda") == resolved  # idempotent
    assert with_attention_mode(config, "cpu") == config  # the cpu device: one pool in RAM already
    startup = startup_plan(config, 80 * gib, "NVIDIA H100", device="cuda", host_available_bytes=100 * gib)
    assert startup is not None
    plan = startup.plan
    assert plan.gpu_kv_tokens == resolved.num_kv_blocks * 16
    kv_bytes_per_token = plan.block_bytes // 16
    # 4 sequences of 128K (under a quarter of the 100 GiB available)
    assert plan.cpu_kv_tokens == 4 * 131072 and 4 * 131072 * kv_bytes_per_token < 25 * gib
    budgeted = startup_plan(
        replace(config, cpu_kv_budget_bytes=2 * gib),
        80 * gib,
        "NVIDIA H100",
        device="cuda",
        host_available_bytes=100 * gib,
    )
    assert budgeted is not None and budgeted.plan.cpu_kv_tokens * kv_bytes_per_token == 2 * gib


def test_attention_cpu_refuses_another_cold_path() -> None:
    from kvspill.config import with_attention_mode

    with pytest.raises(InvalidParameterError, match="--attention cpu attends .* --cold-attention stream"):
        with_attention_mode(EngineConfig(attention="cpu", cold_attention="stream"), "cuda")
    assert (
        with_attention_mode(EngineConfig(attention="cpu", cold_attention="stream"), "cpu").cold_attention
        == "stream"
    )


@pytest.mark.parametrize(
    ("kv_dtype", "factor"), [("auto", 1.0), ("fp8", 0.47), ("int8", 0.54), ("fp32", 1.27)]
)
def test_the_cpu_path_rate_follows_the_kv_format(kv_dtype: str, factor: float) -> None:
    """The calibration times the CPU kernel over bf16; its work is per value, so a plan over fp8,
    int8 or fp32 KV divides that KV's bytes by the rate scaled to the format."""
    request = PlanRequest(
        spec=LLAMA_8B, vram_budget_bytes=26 * GiB, context_len=131072, ram_budget_bytes=40 * GiB,
        max_num_seqs=1, enforce_eager=True, cold_attention="cpu", kv_dtype=kv_dtype,
    )  # fmt: skip
    bw = replace(DEFAULT_BANDWIDTHS, cpu_attn_gbs=60.0, cpu_attn_layer_s=0.0)
    plan = make_plan(request, bw)
    cpu_bytes = plan.placed_cpu_tokens * plan.kv_bytes_per_token
    assert plan.placed_cpu_tokens > 0
    assert plan.decode.cold_kv_s == pytest.approx(cpu_bytes / (60e9 * factor))


def test_the_cpu_path_rate_follows_the_head_size() -> None:
    """Each dot's fixed work weighs more per byte at head_dim 64 than at the calibration's 128."""
    from kvspill.plan.cold_rates import cpu_kv_rate

    assert cpu_kv_rate(80.0, "bf16") == pytest.approx(80.0)
    assert 0.82 < cpu_kv_rate(80.0, "bf16", 64) / 80.0 < 0.87  # measured: 0.82-0.87
    assert cpu_kv_rate(80.0, "bf16", 256) > 80.0
    assert cpu_kv_rate(80.0, "fp8", 64) == pytest.approx(cpu_kv_rate(80.0, "bf16", 64) * 0.47)


def test_the_table_says_what_a_stream_graph_hides_beneath_its_gather() -> None:
    """The step row adds up the step's parts; a graphed stream step reads the weights and gpu KV
    beneath its gather, and the row says how much (an eager one hides nothing)."""
    request = PlanRequest(
        spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=98_304, ram_budget_bytes=40 * GiB
    )
    graphed = make_plan(request, DEFAULT_BANDWIDTHS)
    assert graphed.decode.cold_graphs and graphed.decode.overlap_s > 0
    hidden = f"-{graphed.decode.overlap_s * 1e3:.3g} hidden"
    assert hidden in format_plan_table([graphed])
    eager = make_plan(replace(request, enforce_eager=True), DEFAULT_BANDWIDTHS)
    assert not eager.decode.cold_graphs and "hidden" not in format_plan_table([eager])
    assert eager.decode_tok_s < graphed.decode_tok_s


def test_the_rope_table_is_charged_on_cuda_by_the_model_len() -> None:
    """The loader builds the table for max_model_len positions (fp32, head_dim wide): the plan
    takes it from the GPU's KV room, not from a host pool (the CPU engine's weights are measured)."""
    request = request_from_engine_config(EngineConfig(max_model_len=1 << 20), LLAMA_8B, 24 * GiB)
    assert request.rope_positions == 1 << 20 and request.rope_table_bytes == 512 * MiB
    short = replace(request, context_len=8192)  # a plan at a shorter context: the same table
    assert short.rope_table_bytes == 512 * MiB
    cuda = make_plan(short, DEFAULT_BANDWIDTHS)
    without = make_plan(replace(short, rope_positions=1), DEFAULT_BANDWIDTHS)
    assert (
        cuda.rope_table_bytes == 512 * MiB and cuda.reserve_bytes - without.reserve_bytes == 512 * MiB - 512
    )
    assert abs(without.gpu_kv_bytes - cuda.gpu_kv_bytes - 512 * MiB) <= cuda.block_bytes  # whole blocks
    assert make_plan(replace(short, device="cpu"), DEFAULT_BANDWIDTHS).rope_table_bytes == 0


def test_past_the_models_positions_the_note_names_the_rope_scaling_given(cli: typer.Typer) -> None:
    # llama-1b's shape has 131,072 positions
    args = ["plan", "llama-1b", "--vram-budget", "16GiB", "--context", "256K"]
    bare = CliRunner().invoke(cli, args)
    assert bare.exit_code == 0, bare.output
    assert "past the model's 131072 positions: it needs --rope-scaling" in bare.output
    scaled = CliRunner().invoke(cli, [*args, "--rope-scaling", "yarn:2"])
    assert scaled.exit_code == 0, scaled.output
    assert "--rope-scaling yarn extends them" in scaled.output and "it needs" not in scaled.output
    assert "not planned" not in scaled.output
    config = EngineConfig(max_model_len=262144, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    request = request_from_engine_config(config, KNOWN_SHAPES["llama-1b"], 16 * GiB)
    assert request.rope_scaling == "dynamic"
