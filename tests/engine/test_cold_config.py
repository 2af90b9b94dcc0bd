"""How the engine resolves --cold-attention from the saved calibration (kv/cold_config.engine_cold_config)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvspill.config import EngineConfig
from kvspill.kv.cold_config import engine_cold_config
from kvspill.plan import Bandwidths

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
    if calibration is not None:
        assert cold.cpu_attn_gbs == calibration.cpu_attn_gbs and cold.h2d_gbs == calibration.stream_gbs


def test_auto_says_once_at_start_that_it_splits_and_why(caplog):
    config = EngineConfig(model="random:llama-1b")
    with caplog.at_level("INFO", logger="kvspill.kv.cold_config"):
        engine_cold_config(config, CALIBRATED, 1024, CUDA)
    assert "--cold-attention auto: split" in caplog.text and "43.8 GB/s" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="kvspill.kv.cold_config"):
        engine_cold_config(config, None, 1024, CUDA)
    assert caplog.text == ""
