"""Fit by default and the modes (kvspill/modes.py, plan/fit.py): the tiers an engine sizes with no
--cpu-kv-budget, the context and RoPE of extended/extreme, and `kvspill plan` showing exactly
what start-up will allocate for each mode."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError, ModelNotFoundError, OutOfKVMemoryError
from kvspill.modes import MODES
from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, compute_plan
from kvspill.plan import flag_plans as flag_plans_module
from kvspill.plan.fit import AutoTiers, HostRoom, fit_line, fit_tiers, mode_rope_scaling
from kvspill.plan.flag_plans import plans_for_flags
from kvspill.plan.spec import KNOWN_SHAPES
from kvspill.plan.startup import enforce, mode_config, startup_plan
from kvspill.plan.units import GiB

LLAMA_3B = KNOWN_SHAPES["llama-3b"]  # 128K trained context, 112 KiB of bf16 KV a token
ROOM = HostRoom(ram_available_bytes=100 * GiB, disk_free_bytes=400 * GiB)
AUTO = AutoTiers(cpu=True, disk=True)


def _request(context: int = 131072, vram: int = 16 * GiB) -> PlanRequest:
    return PlanRequest(spec=LLAMA_3B, vram_budget_bytes=vram, context_len=context, gpu_memory_utilization=1.0)


def test_default_mode_sizes_a_cpu_tier_for_what_the_gpu_cannot_hold() -> None:
    alone = compute_plan(_request(), DEFAULT_BANDWIDTHS)
    assert not alone.fits  # 128K of a 3B model's KV is more than a 16 GiB card keeps
    fitted = fit_tiers(_request(), MODES["default"], ROOM, AUTO)
    plan = compute_plan(fitted, DEFAULT_BANDWIDTHS)
    assert plan.fits and plan.placed_cpu_tokens > 0 and plan.disk_kv_bytes == 0
    cold_bytes = (131072 - plan.gpu_kv_tokens) * plan.kv_bytes_per_token
    # what the context needs past the GPU (a few blocks of margin), not half the RAM
    assert cold_bytes <= fitted.ram_budget_bytes <= cold_bytes * 1.03 + 2 * plan.block_bytes


def test_default_mode_adds_nothing_when_the_gpu_holds_the_context() -> None:
    fitted = fit_tiers(_request(context=8192), MODES["default"], ROOM, AUTO)
    assert fitted.ram_budget_bytes == 0 and fitted.disk_budget_bytes == 0


def test_the_ram_share_bounds_the_automatic_tier_and_a_given_tier_is_kept() -> None:
    small = HostRoom(ram_available_bytes=8 * GiB, disk_free_bytes=0)
    fitted = fit_tiers(_request(), MODES["default"], small, AUTO)
    assert fitted.ram_budget_bytes == 4 * GiB  # half of 8 GiB: not enough, and the plan says so
    assert not compute_plan(fitted, DEFAULT_BANDWIDTHS).fits
    shared = fit_tiers(_request(), MODES["default"], ROOM, AutoTiers(cpu=True, disk=False, ram_share=0.01))
    assert shared.ram_budget_bytes == int(100 * GiB * 0.01)
    given = replace(_request(), ram_budget_bytes=3 * GiB)
    assert fit_tiers(given, MODES["default"], ROOM, AutoTiers(cpu=False, disk=False)) == given


def test_filling_modes_take_their_share() -> None:
    extended = fit_tiers(_request(), MODES["extended"], ROOM, AUTO)
    assert extended.ram_budget_bytes == 50 * GiB and extended.disk_budget_bytes == 0  # never disk
    extreme = fit_tiers(_request(), MODES["extreme"], ROOM, AUTO)
    assert extreme.ram_budget_bytes == 80 * GiB and extreme.disk_budget_bytes == 100 * GiB


def test_mode_rope_scaling_extends_each_kind_of_rope() -> None:
    assert mode_rope_scaling(LLAMA_3B, 131072) is None  # within the trained context
    plain = replace(LLAMA_3B, rope_scaling=())
    assert mode_rope_scaling(plain, 4 * 131072) == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 131072,
        "max_position_embeddings": 4 * 131072,
    }
    llama3 = replace(
        LLAMA_3B,
        rope_scaling=(("rope_type", "llama3"), ("factor", 8.0), ("original_max_position_embeddings", 8192)),
    )
    raised = mode_rope_scaling(llama3, 2 * 131072)
    assert raised is not None
    assert raised["rope_type"] == "llama3" and raised["factor"] == 16.0
    assert raised["original_max_position_embeddings"] == 8192 and raised["max_position_embeddings"] == 262144
    with pytest.raises(ValueError, match="longrope"):
        mode_rope_scaling(replace(LLAMA_3B, rope_scaling=(("rope_type", "longrope"),)), 262144)


def test_extreme_means_sparse_unless_a_path_is_given() -> None:
    assert EngineConfig(mode="extreme").cold_attention == "sparse"
    assert EngineConfig(mode="extreme", cold_attention="stream").cold_attention == "stream"
    assert EngineConfig(mode="extended").cold_attention == "auto"
    with pytest.raises(InvalidParameterError, match="--mode must be one of default, extended, extreme"):
        EngineConfig(mode="ludicrous")


def test_mode_config_gives_the_context_and_rope_a_flag_did_not() -> None:
    config = EngineConfig(model="random:llama-1b", mode="extended", vram_budget_bytes=16 * GiB)
    extended = mode_config(config, "cuda", 141 * GiB, ROOM)
    assert extended.max_model_len == 4 * 131072 and extended.rope_scaling is not None
    # the shape's own Llama 3 RoPE (32 over 8K trained positions), raised 4x
    assert extended.rope_scaling["rope_type"] == "llama3" and extended.rope_scaling["factor"] == 128.0
    given = mode_config(replace(config, max_model_len=65536), "cuda", 141 * GiB, ROOM)
    assert given.max_model_len == 65536 and given.rope_scaling is None  # within the trained context
    tight = HostRoom(ram_available_bytes=4 * GiB, disk_free_bytes=0)
    extreme = mode_config(replace(config, mode="extreme"), "cuda", 141 * GiB, tight)
    assert 131072 <= extreme.max_model_len < 8 * 131072  # the longest the tiers hold
    assert extreme.max_model_len % 1024 == 0
    default = replace(config, mode="default")
    assert mode_config(default, "cuda", 141 * GiB, ROOM) == default


@pytest.mark.parametrize("mode", list(MODES))
def test_kvspill_plan_shows_the_tiers_start_up_sizes(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kvspill plan llama-3b --vram-budget 16GiB --mode X` and an engine's start-up plan on a
    card with the same room: the same context, the same blocks in every tier."""
    monkeypatch.setattr(flag_plans_module, "read_host_room", lambda kv_disk_dir=None: ROOM)
    flags = {"vram_budget_bytes": 16 * GiB, "mode": mode}
    _, plans, _ = plans_for_flags("llama-3b", flags)
    config = mode_config(EngineConfig(model="random:llama-3b", **flags), "cuda", 141 * GiB, ROOM)  # type: ignore[arg-type]
    engine = startup_plan(
        config, 141 * GiB, None, device="cuda", host_available_bytes=100 * GiB, disk_free_bytes=400 * GiB
    )
    assert engine is not None
    for column in (plans[mode], plans["yours"]):
        assert column.context_len == engine.plan.context_len
        assert (column.gpu_kv_tokens, column.cpu_kv_tokens, column.disk_kv_tokens) == (
            engine.plan.gpu_kv_tokens,
            engine.plan.cpu_kv_tokens,
            engine.plan.disk_kv_tokens,
        )
    assert engine.plan.fits


def test_a_context_no_tier_can_hold_stops_start_up_with_advice() -> None:
    config = EngineConfig(model="random:llama-3b", vram_budget_bytes=16 * GiB)
    startup = startup_plan(
        config, 141 * GiB, None, device="cuda", host_available_bytes=2 * GiB, disk_free_bytes=0
    )
    assert startup is not None and not startup.plan.fits
    with pytest.raises(OutOfKVMemoryError, match="--cpu-kv-budget"):
        enforce(startup, config, on_gpu=True)


def test_fit_line_says_where_the_context_goes_and_how_to_keep_it_on_the_gpu() -> None:
    plan = compute_plan(fit_tiers(_request(), MODES["default"], ROOM, AUTO), DEFAULT_BANDWIDTHS)
    line = fit_line(plan)
    assert line.startswith("128K context: ")
    assert "tokens on the GPU" in line and "of RAM" in line and "tok/s" in line
    assert "--max-model-len" in line and "keeps it all on the GPU" in line
    # int8 KV (58 KiB a token) keeps 128K of this model on a 24 GiB card: the line names it
    roomy = compute_plan(fit_tiers(_request(vram=20 * GiB), MODES["default"], ROOM, AUTO), DEFAULT_BANDWIDTHS)
    assert "--kv-cache-dtype int8 would too" in fit_line(roomy)
    assert "all of it on the GPU" in fit_line(compute_plan(_request(context=8192), DEFAULT_BANDWIDTHS))


@pytest.mark.parametrize("shape", ["llama-1b", "llama-3b", "llama-8b"])
@pytest.mark.parametrize("vram_gib", [8, 16, 24])
def test_the_longest_context_a_mode_picks_fits(
    shape: str, vram_gib: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extended and extreme pick the longest context their tiers hold: where the mode fits the
    trained context at all (extreme's sparse path needs GPU room of its own), what it picks fits."""
    monkeypatch.setattr(flag_plans_module, "read_host_room", lambda kv_disk_dir=None: ROOM)
    flags = {"vram_budget_bytes": vram_gib * GiB, "quantization": "q4_k_m"}
    _, plans, _ = plans_for_flags(shape, flags)
    _, trained, _ = plans_for_flags(shape, {**flags, "max_model_len": 131072})
    for mode in ("extended", "extreme"):
        if trained[mode].fits:
            assert plans[mode].fits, (mode, plans[mode].advice)
            assert plans[mode].context_len >= 131072


def test_kvspill_plan_takes_the_random_models_serve_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kvspill plan random:llama-8b:q4_k_m` plans what `kvspill serve --model random:llama-8b:q4_k_m`
    starts: the shape's quantized weights, the same GPU tier as the engine's start-up plan."""
    monkeypatch.setattr(flag_plans_module, "read_host_room", lambda kv_disk_dir=None: ROOM)
    flags = {"vram_budget_bytes": 16 * GiB, "max_model_len": 8192}
    _, quantized, _ = plans_for_flags("random:llama-8b:q4_k_m", flags)
    _, dense, _ = plans_for_flags("random:llama-8b", flags)
    assert quantized["yours"].request.weight_read_bytes < dense["yours"].weight_bytes / 3  # + its scale pairs
    config = EngineConfig(model="random:llama-8b:q4_k_m", vram_budget_bytes=16 * GiB, max_model_len=8192)
    engine = startup_plan(config, 141 * GiB, None, device="cuda", host_available_bytes=100 * GiB)
    assert engine is not None and engine.plan.gpu_kv_tokens == quantized["yours"].gpu_kv_tokens
    with pytest.raises(ModelNotFoundError, match="SHAPE one of llama-1b"):
        plans_for_flags("random:llama-9b", flags)


@pytest.mark.parametrize(
    ("max_model_len", "max_num_seqs", "env", "kept"),
    [
        (8192, 64, None, True),  # a context fits the GPU beside the pairs
        (131072, 64, None, False),  # 128K spills to RAM: the room holds KV instead
        (131072, 64, "1", True),  # KVSPILL_SCALE_PAIRS=1 keeps them anyway
        (8192, 64, "0", False),
        (8192, 1, "1", False),  # one sequence: the GEMV never reads them
    ],
)
def test_the_engine_keeps_the_scale_pairs_its_plan_counts(
    monkeypatch, max_model_len, max_num_seqs, env, kept
):
    import torch

    from kvspill.engine.setup import _keeps_scale_pairs

    if env is None:
        monkeypatch.delenv("KVSPILL_SCALE_PAIRS", raising=False)
    else:
        monkeypatch.setenv("KVSPILL_SCALE_PAIRS", env)
    config = EngineConfig(
        model="random:llama-8b:q4_k_m",
        vram_budget_bytes=16 * GiB,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        cpu_kv_budget_bytes=64 * GiB,
    )
    startup = startup_plan(config, 141 * GiB, None, device="cuda", host_available_bytes=100 * GiB)
    assert startup is not None and (startup.plan.request.scale_pair_bytes > 0) is kept
    assert _keeps_scale_pairs(config, torch.device("cuda"), startup) is kept
    assert _keeps_scale_pairs(config, torch.device("cpu"), None) is False
