"""`kvspill plan MODEL`: the memory plan for the presets and the user's flags, before loading.

Prints one column per preset (`default`, `extended`, `extreme`) and one for the user's own
flags (`yours`: the default preset with every flag given on the command line applied), or the
same as JSON. Exits 1 with advice when `yours` does not fit, 2 on invalid input.

Invariants:
- Never imports torch and never needs a GPU or model weights: shapes come from a config.json, a
  GGUF header or a known shape name; bandwidths from the saved calibration or documented defaults.
- Host RAM and free disk (for the presets) are read here, and passed to the pure planner.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from kvspill.config import EngineConfig
from kvspill.errors import KvspillError
from kvspill.plan import (
    DEFAULT_BANDWIDTHS,
    PRESETS,
    Bandwidths,
    MemoryPlan,
    PlanRequest,
    bandwidths_for_gpu,
    format_plan_table,
    plan_presets,
    plan_to_json,
    preset_request,
)
from kvspill.plan.spec import KNOWN_SHAPES, ModelSpec
from kvspill.plan.units import GiB, format_bytes, parse_bytes, parse_tokens

ASSUMED_VRAM_BYTES = 24 * GiB  # no flag and no calibrated card: plan for the W3 class (24 GB)


def _bandwidths(gpu: str | None) -> tuple[Bandwidths, Bandwidths | None]:
    """(rates to plan with, the saved calibration if any). `--gpu NAME` wins over the calibration."""
    from kvspill.plan.calibrate import load_calibration

    calibration = load_calibration()
    if gpu is not None:
        return bandwidths_for_gpu(gpu), calibration
    if calibration is None:
        return DEFAULT_BANDWIDTHS, None
    return calibration.complete(bandwidths_for_gpu(calibration.gpu_name)), calibration


def _host_sizes() -> tuple[int | None, int | None]:
    """(host RAM, free disk under the home directory) in bytes; None where unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().total), int(psutil.disk_usage(str(Path.home())).free)
    except (ImportError, OSError):
        return None, None


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def _resolve_vram(vram_budget: str | None, calibration: Bandwidths | None) -> tuple[int, list[str]]:
    """(VRAM budget in bytes, header lines saying where it came from when not from the flag)."""
    if vram_budget is not None:
        return parse_bytes(vram_budget, "--vram-budget"), []
    if calibration is not None and calibration.gpu_total_bytes:
        vram = calibration.gpu_total_bytes
        return vram, [f"VRAM budget: {format_bytes(vram)} (the calibrated {calibration.gpu_name})"]
    vram = ASSUMED_VRAM_BYTES
    return vram, [f"VRAM budget: {format_bytes(vram)} assumed (no --vram-budget, no calibrated GPU)"]


def _text_report(plans: dict[str, MemoryPlan], header: list[str]) -> str:
    yours = plans["yours"]
    lines = [*header, format_plan_table(plans, with_advice=False)]
    lines += [f"{name}: {preset.description}" for name, preset in PRESETS.items()]
    lines.append("yours: the default preset with the flags you gave")
    lines += [f"note: {n}" for n in yours.notes]
    if not yours.fits:
        lines.append("your flags do not fit; what would:")
        lines += [f"  - {a}" for a in yours.advice]
    return "\n".join(lines)


def plan_command(
    model: Annotated[
        str | None,
        typer.Argument(
            help=f"model dir, config.json, .gguf, cached HF id, or one of {', '.join(KNOWN_SHAPES)}; "
            "default: the embedded SmolLM2-135M"
        ),
    ] = None,
    vram_budget: Annotated[
        str | None, typer.Option(help="GPU memory the process may use, e.g. 24GiB")
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None, typer.Option(help="fraction of the VRAM budget to plan")
    ] = None,
    ram_budget: Annotated[
        str | None,
        typer.Option("--ram-budget", "--cpu-kv-budget", help="CPU KV tier (pinned RAM), e.g. 32GiB"),
    ] = None,
    disk_kv_budget: Annotated[str | None, typer.Option(help="disk KV tier, e.g. 200GiB")] = None,
    context: Annotated[str | None, typer.Option(help="tokens per sequence, e.g. 131072 or 128K")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="sequences per step")] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="tokens per step (prefill chunk)")
    ] = None,
    block_size: Annotated[int | None, typer.Option(help="tokens per KV block")] = None,
    kv_dtype: Annotated[str, typer.Option(help="auto, bfloat16, float16, float32, fp8")] = "auto",
    dtype: Annotated[str, typer.Option(help="weight dtype: auto, bfloat16, float16, float32")] = "auto",
    gpu: Annotated[
        str | None, typer.Option(help="plan with a known card's figures: h100, h200, rtx4090")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Show what fits where (GPU, CPU, disk KV tiers) and how fast it will run, before loading."""
    try:
        spec = ModelSpec.from_model_arg(model)
        bandwidths, calibration = _bandwidths(gpu)
        vram, header = _resolve_vram(vram_budget, calibration)
        base = PlanRequest(
            spec=spec,
            vram_budget_bytes=vram,
            context_len=parse_tokens(context, "--context")
            if context is not None
            else spec.max_position_embeddings,
            max_num_seqs=_given(max_num_seqs, EngineConfig.max_num_seqs),
            max_num_batched_tokens=_given(max_num_batched_tokens, EngineConfig.max_num_batched_tokens),
            block_size=_given(block_size, EngineConfig.block_size),
            kv_dtype=kv_dtype,
            weight_dtype=dtype,
        )
        host = _host_sizes()
        user = preset_request("default", base, *host)  # yours: the default preset, then the flags given
        user = replace(
            user,
            preset="yours",
            gpu_memory_utilization=user.gpu_memory_utilization
            if gpu_memory_utilization is None
            else gpu_memory_utilization,
            ram_budget_bytes=user.ram_budget_bytes
            if ram_budget is None
            else parse_bytes(ram_budget, "--ram-budget"),
            disk_budget_bytes=user.disk_budget_bytes
            if disk_kv_budget is None
            else parse_bytes(disk_kv_budget, "--disk-kv-budget"),
        )
        plans = plan_presets(base, bandwidths, *host, user=user)
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if as_json:
        payload = {
            "model": spec.name,
            "context_len": base.context_len,
            "vram_budget_bytes": vram,
            "bandwidths_source": bandwidths.source,
            "fits": plans["yours"].fits,
            "plans": {name: plan_to_json(p) for name, p in plans.items()},
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        typer.echo(_text_report(plans, header))
    if not plans["yours"].fits:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `plan` command to `app`."""
    app.command("plan")(plan_command)
