"""How the engine resolves --cold-attention from the saved calibration (attention/cold/config.engine_cold_config)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvspill.attention.cold.config import GPU_HOST_SPARE_CORES, engine_cold_config
from kvspill.config import EngineConfig
from kvspill.plan import Bandwidths
from kvspill.plan.cold_rates import (
    CPU_ATTN_OVERHEAD_PER_LAYER_S,
    graphed_split_min_layer_bytes,
    split_cpu_share,
)

CUDA, CPU = torch.device("cuda"), torch.device("cpu")  # only the type is read: no GPU needed
CALIBRATED = Bandwidths(
    stream_gbs=42.7, cpu_attn_gbs=43.8, h2d_gbs=55.5, measured_at="2026-11-27T13:43:42+00:00"
)


@pytest.mark.parametrize(
    ("cold_attention", "calibration", "device", "tp", "path", "workers", "least"),
    [
        (
            "auto",
            CALIBRATED,
            CUDA,
            1,
            "split",
            1,
            42_700_000,
        ),  # the CPU pays: split, 1 ms of streaming per layer at least
        (
            "auto",
            replace(CALIBRATED, cpu_attn_gbs=20.0),
            CUDA,
            1,
            "auto",
            0,
            0,
        ),  # under half the stream's rate
        ("auto", None, CUDA, 1, "auto", 0, 0),  # no calibration: stream, as before
        ("auto", CALIBRATED, CUDA, 2, "auto", 0, 0),  # tensor parallelism: split never measured there
        ("auto", CALIBRATED, CPU, 1, "auto", 0, 0),  # the CPU device: its own cpu path, no worker
        ("split", None, CUDA, 1, "split", 1, 0),  # asked for: every step, whatever the calibration
        ("cpu", CALIBRATED, CUDA, 1, "cpu", 1, 0),  # a worker, so that the GPU waits for the CPU by itself
        ("cpu", CALIBRATED, CPU, 1, "cpu", 0, 0),
        ("stream", CALIBRATED, CUDA, 1, "stream", 0, 0),
    ],
)
def test_cold_path_from_the_flag_and_the_calibration(
    cold_attention, calibration, device, tp, path, workers, least
):
    config = EngineConfig(model="random:llama-1b", cold_attention=cold_attention, tensor_parallel_size=tp)
    cold = engine_cold_config(config, calibration, 1024, device)
    assert (cold.path, cold.cpu_workers, cold.min_split_layer_bytes) == (path, workers, least)
    # with a worker on a GPU the kernel leaves the engine thread cores to launch on
    spare = max(1, torch.get_num_threads() - GPU_HOST_SPARE_CORES)
    assert cold.cpu_threads == (spare if workers else None)
    asked = engine_cold_config(replace(config, cpu_attention_threads=3), calibration, 1024, device)
    assert asked.cpu_threads == 3
    if calibration is not None:
        assert cold.cpu_attn_gbs == calibration.cpu_attn_gbs and cold.h2d_gbs == calibration.stream_gbs
        assert cold.cpu_layer_s == CPU_ATTN_OVERHEAD_PER_LAYER_S  # not measured: the plan's constant
    assert cold.min_split_layer_bytes_graphed == least  # no stream graphs: the one threshold


def test_auto_with_stream_graphs_splits_a_graphable_step_from_the_plans_crossing() -> None:
    """Where the runner has stream graphs, "auto" splits a step that could replay one only from
    `plan.cold_rates.graphed_split_min_layer_bytes` of cold KV per layer (at the pool's format)."""
    h200 = replace(CALIBRATED, h2d_gbs=55.3, stream_gbs=43.6, cpu_attn_gbs=65.2, cpu_attn_layer_s=0.49e-3)
    config = EngineConfig(model="random:llama-1b", cold_attention="auto")
    cold = engine_cold_config(config, h200, 1024, CUDA, stream_graphs=True)
    assert cold.path == "split" and cold.min_split_layer_bytes == 43_600_000
    assert cold.min_split_layer_bytes_graphed == graphed_split_min_layer_bytes(h200, 65.2, 0.49e-3)
    fp8 = engine_cold_config(config, h200, 1024, CUDA, torch.float8_e4m3fn, stream_graphs=True)
    assert fp8.min_split_layer_bytes_graphed == graphed_split_min_layer_bytes(
        h200, fp8.cpu_attn_gbs, 0.49e-3, "fp8"
    )
    assert fp8.min_split_layer_bytes_graphed > cold.min_split_layer_bytes_graphed  # fp8's CPU rate is lower


def test_auto_asks_whether_the_cpu_pays_at_the_pools_format() -> None:
    """The CPU kernel reads fp8 at 0.47 of bf16's rate: a host where split pays for bf16 KV
    (43.8 against a 42.7 GB/s stream path) streams fp8 KV (20.6 < half of 42.7), as the plan does."""
    config = EngineConfig(model="random:llama-1b", cold_attention="auto")
    assert engine_cold_config(config, CALIBRATED, 1024, CUDA).path == "split"
    assert engine_cold_config(config, CALIBRATED, 1024, CUDA, torch.float8_e4m3fn).path == "auto"


def test_split_share_per_step_follows_the_plan_rule():
    """With both rates and the CPU's fixed time per layer, each step's CPU share is the one that
    ends its two parts together (`plan.costs.split_cpu_share`): smaller for fewer bytes, none
    where the hand-over alone outlasts streaming; a given --cpu-fraction stays fixed."""
    config = EngineConfig(model="random:llama-1b", cold_attention="split")
    calibration = replace(CALIBRATED, cpu_attn_layer_s=0.5e-3)
    cold = engine_cold_config(config, calibration, 1024, CUDA)
    assert cold.cpu_layer_s == 0.5e-3
    big, small = 400 * 10**6, 30 * 10**6
    assert cold.cpu_share_for(big) == split_cpu_share(big, 42.7, 43.8, 0.5e-3)
    assert 0.0 < cold.cpu_share_for(small) < cold.cpu_share_for(big) < 43.8 / (42.7 + 43.8)
    assert cold.cpu_share_for(10 * 10**6) == 0.0  # 0.23 ms of streaming < 0.5 ms of hand-over
    assert replace(cold, cpu_fraction=0.3).cpu_share_for(big) == 0.3


def test_auto_says_once_at_start_that_it_splits_and_why(caplog):
    config = EngineConfig(model="random:llama-1b")
    with caplog.at_level("INFO", logger="kvspill.attention.cold.config"):
        engine_cold_config(config, CALIBRATED, 1024, CUDA)
    assert "--cold-attention auto: split" in caplog.text and "43.8 GB/s" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="kvspill.attention.cold.config"):
        engine_cold_config(config, None, 1024, CUDA)
    assert caplog.text == ""


@pytest.mark.parametrize(
    ("kv_dtype", "factor"), [(torch.bfloat16, 1.0), (torch.float8_e4m3fn, 0.47), (torch.int8, 0.54)]
)
def test_split_divides_by_the_cpu_rate_over_the_pools_format(kv_dtype, factor):
    """The calibrated CPU rate is over bf16; an fp8 or int8 pool is attended at the format's rate."""
    config = EngineConfig(model="random:llama-1b", cold_attention="split")
    cold = engine_cold_config(config, CALIBRATED, 1024, CUDA, kv_dtype)
    assert cold.cpu_attn_gbs == pytest.approx(43.8 * factor)
