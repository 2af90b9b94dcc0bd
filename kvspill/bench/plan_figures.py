"""What the engine benchmark prints beside a row's measured decode speed: the floor of its
placement, the startup plan's prediction (made before loading, from the model's shapes), and the
plan the engine sized its tiers with (`sized_plan_figures`)."""

from __future__ import annotations

from dataclasses import replace

import torch

from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.plan import MemoryPlan


def floor_and_plan(
    engine: LLMEngine,
    config: EngineConfig,
    ctx: int,
    weight_bytes: int,
    kv_per_token: int,
    gpu_kv_tokens: int,
    hbm_gbs: float,
    h2d_gbs: float,
    measured: float,
) -> dict[str, float | list[int]]:
    """The floor of this run's placement (hot KV over HBM, cold KV over pinned H2D: the stream
    path's bound) and the plan's predicted decode speed, both beside the measured figure."""
    from kvspill.plan.startup import startup_plan

    # The scheduler spills only when the gpu tier is full: what does not fit there is cold.
    hot_tokens = min(ctx, gpu_kv_tokens)
    cold_tokens = ctx - hot_tokens
    moved_cold, hbm_tokens = cold_tokens * kv_per_token, hot_tokens
    if config.cold_attention == "sparse":  # the budget's blocks, plus every summary read on the GPU
        moved_cold = min(cold_tokens, config.sparse_budget_tokens) * kv_per_token
        hbm_tokens += cold_tokens // config.block_size  # a block's summary: one token's KV bytes
    offloader = engine.bundle.loaded.offloader
    offloaded = offloader.host_bytes if offloader is not None else 0  # crosses PCIe every step
    floor_s = (weight_bytes + kv_per_token * hbm_tokens) / (hbm_gbs * 1e9) + (moved_cold + offloaded) / (
        h2d_gbs * 1e9
    )
    from kvspill.plan.calibrate import load_calibration

    planned = startup_plan(
        replace(config, max_model_len=ctx),
        torch.cuda.get_device_properties(0).total_memory,
        torch.cuda.get_device_name(0),
        load_calibration(),
    )
    out: dict[str, float | list[int]] = dict(
        floor_tok_s=round(1 / floor_s, 2),
        floor_ratio=round(measured * floor_s, 3),
        hot_tokens=hot_tokens,
        cold_tokens=cold_tokens,
        bytes_per_token=weight_bytes + kv_per_token * ctx,
    )
    if planned is not None:
        out.update(
            plan_decode_tok_s=round(planned.plan.decode_tok_s, 2),
            plan_vs_measured=round(planned.plan.decode_tok_s / measured, 3),
            plan_ttft_s=round(planned.plan.ttft_s, 2),
            plan_placement=[planned.plan.placed_gpu_tokens, planned.plan.placed_cpu_tokens],
        )
    out.update(sized_plan_figures(engine.memory_plan, ctx, measured))
    return out


def sized_plan_at(sized: MemoryPlan, ctx: int) -> MemoryPlan:
    """The plan the engine sized its tiers with, at context `ctx` (the loaded model's RoPE table)."""
    from kvspill.plan.arithmetic import compute_plan

    request = sized.request
    return compute_plan(
        replace(request, context_len=ctx, rope_positions=request.rope_table_positions), sized.bandwidths
    )


def batched_plan_tok_s(sized: MemoryPlan, ctx: int, num_seqs: int) -> float | None:
    """What the sized plan predicts for `num_seqs` sequences of `ctx` decoding at once, tokens a
    second in all (plan/batched.py; None where it does not predict)."""
    from kvspill.plan.batched import batched_decode

    step = batched_decode(sized_plan_at(sized, ctx), num_seqs)
    return step.tok_s if step is not None else None


def sized_plan_figures(sized: MemoryPlan, ctx: int, measured: float) -> dict[str, float | list[int]]:
    """The plan the engine sized its tiers with (measured weights, activations and runtime memory,
    so its placement is the engine's), at `ctx`: the startup plan's error less its placement's
    (before the plan counted the RoPE table, the startup plan put 0.19 GiB more KV on the GPU
    at W3 128K fp8: 17% fewer cold tokens)."""
    at_ctx = sized_plan_at(sized, ctx)  # the RoPE table stays the loaded model's at any context
    return dict(
        sized_plan_decode_tok_s=round(at_ctx.decode_tok_s, 2),
        sized_plan_vs_measured=round(at_ctx.decode_tok_s / measured, 3),
        sized_plan_placement=[at_ctx.placed_gpu_tokens, at_ctx.placed_cpu_tokens],
        sized_plan_ttft_s=round(at_ctx.ttft_s, 2),
        # what start-up measured and the pools were planned beside (the 1M row's card held 0.81 GiB
        # outside the allocator at its end: these say what the plan had counted)
        sized_activation_gib=round(sized.activation_peak_bytes / 2**30, 3),
        sized_runtime_gib=round(sized.runtime_reserve_bytes / 2**30, 3),
    )
