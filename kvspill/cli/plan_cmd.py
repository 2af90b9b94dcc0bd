"""`kvspill plan MODEL`: the memory plan for each mode and the user's flags, before loading.

Prints one column per mode (`default`, `extended`, `extreme`: `serve --mode X` with the engine
flags given) and one for the user's own flags (`yours`: every flag given, --mode included: what
`serve` with them runs), or the same as JSON. Exits 1 with advice when `yours` does not fit, 2 on invalid input.

Takes every engine flag (`kvspill/options.py`), as `generate` and `serve` do: those that shape
a plan set every column, except the memory knobs, which only set `yours`; the rest are checked
and named in a "not planned" line. `--ram-budget` and `--context` are plan's older names for
`--cpu-kv-budget` and `--max-model-len` and keep working.

The plans themselves are `plan/flag_plans.py` (the manager's `/api/plan` answers the same);
here the flags are parsed and the result printed.

Invariants:
- Never imports torch and never needs a GPU or model weights (`plan/flag_plans.py`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from kvspill.cli.engine_options import with_engine_options
from kvspill.errors import KvspillError
from kvspill.modes import MODES
from kvspill.options import EngineOptions, config_field, engine_kwargs, flag_name
from kvspill.plan import MemoryPlan, format_plan_table
from kvspill.plan.flag_plans import PLANNED_FIELDS, plans_for_flags
from kvspill.plan.spec import KNOWN_SHAPES


def _not_planned(engine: EngineOptions) -> list[str]:
    """Header lines naming the engine flags given that the plan does not model."""
    names = [flag_name(n) for n in engine.given() if config_field(n) not in PLANNED_FIELDS]
    return [f"not planned (checked, then ignored): {', '.join(names)}"] if names else []


def _text_report(plans: dict[str, MemoryPlan], header: list[str]) -> str:
    yours = plans["yours"]
    lines = [*header, format_plan_table(plans, with_advice=False)]
    lines += [f"{name}: {mode.description}" for name, mode in MODES.items()]
    lines.append("yours: the flags you gave (--mode, default: default): what `kvspill serve` with them runs")
    lines += [f"note: {n}" for n in yours.notes]
    if not yours.fits:
        lines.append("your flags do not fit; what would:")
        lines += [f"  - {a}" for a in yours.advice]
    return "\n".join(lines)


def plan_json(
    model: str | None,
    engine: EngineOptions,
    ram_budget: str | None = None,
    context: str | None = None,
    kv_dtype: str = "auto",
    gpu: str | None = None,
) -> tuple[dict[str, Any], dict[str, MemoryPlan], list[str]]:
    """(the `--json` payload, the plans by column, header lines) of `kvspill plan` with these
    flags (`plan/flag_plans.py`); raises KvspillError on bad input."""
    return plans_for_flags(model, engine_kwargs(engine), ram_budget, context, kv_dtype, gpu)


@with_engine_options
def plan_command(
    model: Annotated[
        str | None,
        typer.Argument(
            help=f"model dir, config.json, .gguf, cached HF id, or one of {', '.join(KNOWN_SHAPES)}; "
            "default: the embedded SmolLM2-135M"
        ),
    ] = None,
    # plan's older names, kept for scripts but hidden: the engine's own flags say the same
    # (--cpu-kv-budget, --max-model-len, --kv-cache-dtype), one name per concept.
    ram_budget: Annotated[
        str | None, typer.Option(hidden=True, help="--cpu-kv-budget by its older name")
    ] = None,
    context: Annotated[
        str | None, typer.Option(hidden=True, help="--max-model-len by its older name")
    ] = None,
    kv_dtype: Annotated[str, typer.Option(hidden=True, help="--kv-cache-dtype by its older name")] = "auto",
    gpu: Annotated[
        str | None, typer.Option(help="plan with a known card's figures: h100, h200, rtx4090")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    *,
    engine: EngineOptions,
) -> None:
    """Show what fits where (GPU, CPU, disk KV tiers) and how fast it will run, before loading.

    One column per --mode (what `serve --mode X` runs with the engine flags given) and `yours`:
    every flag given, --mode and the memory ones (--gpu-memory-utilization, --cpu-kv-budget,
    --disk-kv-budget, --kv-cache-memory) included. Flags the plan does not model (e.g. --device)
    are checked, then ignored.
    """
    try:
        model = _registered_or_given(model)
        payload, plans, header = plan_json(model, engine, ram_budget, context, kv_dtype, gpu)
        refusals = _host_refusals(engine) if gpu is None else []
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if as_json:
        typer.echo(json.dumps({**payload, "host_refusals": refusals}, indent=2))
    else:
        report = _text_report(plans, header + _not_planned(engine))
        typer.echo("\n".join([report, *(f"serve would refuse on this host: {r}" for r in refusals)]))
    if not plans["yours"].fits or refusals:
        raise typer.Exit(1)


def _host_refusals(engine: EngineOptions) -> list[str]:
    """What `serve` with these flags refuses on this host before loading (a cpu tier past the
    available RAM, a disk tier past the free space: engine/host_budgets.py), which the plan,
    a plan for any host, does not check."""
    from kvspill.engine.host_budgets import HostBudgetError, check_cpu_kv_budget, check_disk_kv_budget

    # The tier flags alone, as parsed (the plan checked them): an engine config would also refuse
    # what only the plan takes, such as --quantization q4_k_m.
    given = engine_kwargs(engine)
    refusals = []
    for check in (
        lambda: check_cpu_kv_budget(given.get("cpu_kv_budget_bytes")),
        lambda: check_disk_kv_budget(given.get("kv_disk_dir"), given.get("disk_kv_budget_bytes")),
    ):
        try:
            check()
        except HostBudgetError as e:
            refusals.append(str(e))
    return refusals


def _registered_or_given(model: str | None) -> str | None:
    """A registry name's files (the embedded model's name too); anything else as given, for the
    plan to read or to say what MODEL may be. `plan` never downloads."""
    from kvspill.errors import ModelNotFoundError
    from kvspill.registry.pull import ensure_local_model

    try:
        return ensure_local_model(model, offline=True)
    except ModelNotFoundError:
        return model


def register(app: typer.Typer) -> None:
    """Add the `plan` command to `app`."""
    app.command("plan")(plan_command)
