"""The plan and the engine read one record of runtime choices (plan/choices.py): over a grid of
configurations (cold paths, tensor parallelism, with and without a calibration, cuda and cpu
facts, the graph switches) the record start-up's plan computed equals the one the engine's setup
builds (`engine.setup.runtime_choices`), without loading a model."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from kvspill.config import COLD_ATTENTION, EngineConfig, with_attention_mode
from kvspill.engine.setup import runtime_choices
from kvspill.plan import Bandwidths
from kvspill.plan.choices import ColdGraphs, ColdPath, DeviceFacts, RuntimeChoices, resolve_choices
from kvspill.plan.spec import ModelSpec
from kvspill.plan.startup import startup_plan
from kvspill.plan.units import GiB
from kvspill.storage.layout import engine_layout

H200 = 141 * GiB
CALIBRATED = Bandwidths(
    stream_gbs=42.7,
    cpu_attn_gbs=43.8,
    h2d_gbs=55.5,
    cpu_attn_layer_s=0.49e-3,
    measured_at="2026-11-27T13:43:42+00:00",
)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}

GRID = list(
    itertools.product(
        COLD_ATTENTION,  # auto, stream, cpu, split, sparse
        [1, 2],  # --tensor-parallel-size
        [None, CALIBRATED],
        ["cuda", "cpu"],
        ["bfloat16", "float16"],
    )
)


def _engine_config(cold_attention: str, tp: int, device: str, dtype: str, **flags: object) -> EngineConfig:
    """The config as the engine's setup runs it (engine/setup._prelude): the picked dtype, --attention's mode."""
    config = EngineConfig(
        model="random:llama-1b",
        cold_attention=cold_attention,
        tensor_parallel_size=tp,
        dtype=dtype,
        max_model_len=32768,
        **flags,  # type: ignore[arg-type]
    )
    return with_attention_mode(config, device)


def _both(
    config: EngineConfig, device: str, calibration: Bandwidths | None
) -> tuple[RuntimeChoices, RuntimeChoices]:
    """(the record of start-up's plan, the record the engine's setup builds)."""
    total = H200 if device == "cuda" else None
    name = "NVIDIA H200" if device == "cuda" else None
    startup = startup_plan(config, total, name, calibration, device=device, host_available_bytes=64 * GiB)
    assert startup is not None and startup.plan.choices is not None
    tp = config.tensor_parallel_size
    spec = ModelSpec.from_model_arg(config.model)
    layout = engine_layout(
        config, spec.num_layers, spec.num_kv_heads // tp, spec.head_dim, DTYPES[config.dtype]
    )
    facts = DeviceFacts.read(device, total, tp)  # as engine/setup._prelude reads them
    return startup.plan.choices, runtime_choices(config, facts, calibration, layout.dtype, layout.head_dim)


@pytest.mark.parametrize(("cold_attention", "tp", "calibration", "device", "dtype"), GRID)
def test_the_plan_and_the_engine_make_the_same_choices(cold_attention, tp, calibration, device, dtype):
    config = _engine_config(cold_attention, tp, device, dtype)
    planned, engine = _both(config, device, calibration)
    assert planned == engine


@pytest.mark.parametrize(
    "flags",
    [
        {"enforce_eager": True},
        {"vram_budget_bytes": 24 * GiB},
        {"gpu_memory_utilization": 0.5},
        {"cpu_offload_gb": 1.0},
        {"kv_cache_dtype": "fp8"},
        {"sparse_cache_seqs": 0},
        {"block_size": 32},
    ],
)
@pytest.mark.parametrize("cold_attention", ["auto", "sparse"])
def test_they_agree_on_the_other_flags_too(flags, cold_attention):
    config = _engine_config(cold_attention, 1, "cuda", "bfloat16", **flags)
    planned, engine = _both(config, "cuda", CALIBRATED)
    assert planned == engine


@pytest.mark.parametrize("switch", ["STREAM", "SPARSE", "TP"])
def test_they_read_the_same_graph_switches(monkeypatch, switch):
    monkeypatch.setenv(f"KVSPILL_{switch}_CUDA_GRAPHS", "0")
    for cold_attention, tp in itertools.product(["auto", "sparse"], [1, 2]):
        config = _engine_config(cold_attention, tp, "cuda", "bfloat16")
        planned, engine = _both(config, "cuda", CALIBRATED)
        assert planned == engine


def test_tensor_parallelism_never_splits_auto_in_the_plan_either():
    """The divergence this record closed: the plan's "auto" could split under tensor parallelism
    while the engine never did."""
    one, _ = _both(_engine_config("auto", 1, "cuda", "bfloat16"), "cuda", CALIBRATED)
    two, _ = _both(_engine_config("auto", 2, "cuda", "bfloat16"), "cuda", CALIBRATED)
    assert one.cold_path is ColdPath.SPLIT and one.auto_split and one.split.min_layer_bytes == 42_700_000
    assert two.cold_path is ColdPath.STREAM and not two.auto_split and two.split.min_layer_bytes == 0
    assert two.cold_graphs is None  # cold graphs are one GPU's


def test_the_record_on_each_device():
    cpu = resolve_choices(_engine_config("auto", 1, "cpu", "float16"), DeviceFacts("cpu"), CALIBRATED)
    assert (cpu.cold_path, cpu.decode_graphs, cpu.cold_graphs, cpu.cpu_workers) == (
        ColdPath.CPU,
        False,
        None,
        0,
    )
    assert cpu.vram_ceiling_bytes is None
    facts = DeviceFacts("cuda", total_bytes=100 * GiB)
    cuda = resolve_choices(_engine_config("sparse", 1, "cuda", "bfloat16"), facts, None)
    assert (cuda.cold_path, cuda.exact_path, cuda.cold_graphs) == (
        ColdPath.SPARSE,
        ColdPath.STREAM,
        ColdGraphs.SPARSE,
    )
    assert cuda.vram_ceiling_bytes == int(100 * GiB * EngineConfig.gpu_memory_utilization)
    unpinned = resolve_choices(
        _engine_config("sparse", 1, "cuda", "bfloat16"), replace(facts, cpu_pool_pinned=False), None
    )
    assert unpinned.cold_graphs is None and unpinned.sparse_eager_reason == "the cpu tier is not pinned"


def test_every_cold_path_is_a_flag_value():
    """Adding a cold path adds a ColdPath member; --cold-attention takes it (docs/architecture.md)."""
    assert set(COLD_ATTENTION) == {"auto"} | {path.value for path in ColdPath}
