"""`kvspill status` (what a running server serves, its tiers) and `kvspill quickstart` (doctor, plan,
a short generation, then the next commands to try).

`status` only speaks HTTP to the server (`/health`, `/v1/models`, `/v1/kv`): it never imports the
engine. Both exit 1 when what they check is not there.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

from kvspill.plan.units import format_bytes
from kvspill.stats import KVStats

QUICKSTART_CONTEXT = 2048  # tokens: the short generation's context, and its plan's


def _get_json(url: str, timeout: float, api_key: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


def server_status(url: str, timeout: float = 2.0, api_key: str | None = None) -> dict[str, Any]:
    """Health, models and KV tiers of the server at `url`; raises OSError when it is unreachable."""
    base = url.rstrip("/")
    health, _ = _get_json(f"{base}/health", timeout, api_key)
    models_status, models = _get_json(f"{base}/v1/models", timeout, api_key)
    _, kv = _get_json(f"{base}/v1/kv", timeout, api_key)
    return {
        "url": base,
        "health": health,
        "models_status": models_status,  # 401/403: the API key is missing or refused
        "api_key_sent": api_key is not None,
        "models": (models or {}).get("data", []),
        "kv": kv,
    }


def status_problem(status: dict[str, Any]) -> str | None:
    """Why `kvspill status` should fail, in one line; None when the server is ready and answers."""
    code = status.get("models_status")
    if code in (401, 403):
        if status.get("api_key_sent"):
            return f"the server refused the API key (HTTP {code}): check --api-key / KVSPILL_API_KEY"
        return f"the server needs an API key (HTTP {code}): pass --api-key KEY or set KVSPILL_API_KEY"
    if status["health"] != 200:
        return f"the server is not ready (health {status['health']})"
    return None


def format_status(status: dict[str, Any]) -> str:
    lines = [
        f"server {status['url']}: " + ("ready" if status["health"] == 200 else f"health {status['health']}")
    ]
    for model in status["models"]:
        lines.append(f"  model {model.get('id')} (max_model_len {model.get('max_model_len')})")
    if status["kv"] is None:  # no /v1/kv (an error status, or not a kvspill server)
        return "\n".join(lines)
    kv = KVStats.from_json(status["kv"])
    for tier, usage in kv.tiers.items():
        if usage.blocks:
            lines.append(
                f"  {tier:<5} {usage.used_blocks}/{usage.blocks} blocks, "
                f"{format_bytes(usage.used_bytes)} of {format_bytes(usage.total_bytes)}"
            )
    if kv.scheduler is not None:
        sched = kv.scheduler
        lines.append(
            f"  requests running {sched.num_running}, waiting {sched.num_waiting}, "
            f"preemptions {sched.num_preemptions}"
        )
    for req_id, split in kv.requests.items():
        lines.append(
            f"  {req_id}: gpu {split.num_gpu_blocks} / cpu {split.num_cpu_blocks} / "
            f"disk {split.num_disk_blocks} blocks ({split.status})"
        )
    if kv.total_bytes_moved:
        lines.append(
            "  moved "
            + ", ".join(
                f"{k.replace('_to_', '->')} {format_bytes(v)}" for k, v in kv.bytes_moved.items() if v
            )
        )
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    if any(c.name == "status" for c in app.registered_commands):
        return

    @app.command()
    def status(
        url: Annotated[str, typer.Option(envvar="KVSPILL_URL", help="The server.")] = "http://127.0.0.1:8000",
        api_key: Annotated[str | None, typer.Option(envvar="KVSPILL_API_KEY")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """What a running server is serving: its model, KV tiers and requests."""
        try:
            result = server_status(url, api_key=api_key)
        except OSError as e:
            typer.echo(f"error: no kvspill server at {url} ({e}); start one with `kvspill serve`", err=True)
            raise typer.Exit(1) from e
        typer.echo(json.dumps(result, indent=2) if as_json else format_status(result))
        problem = status_problem(result)
        if problem is not None:
            typer.echo(f"error: {problem}", err=True)
            raise typer.Exit(1)

    @app.command()
    def quickstart(
        prompt: Annotated[
            str, typer.Option(help="What to ask the embedded model.")
        ] = "Write a haiku about the sea.",
    ) -> None:
        """Doctor, then the memory plan, then a short generation on the embedded model, then what to try next."""
        from kvspill.hardware.checks import format_checks, run_checks
        from kvspill.plan import format_plan_table
        from kvspill.plan.flag_plans import plans_for_flags

        typer.echo("== 1. doctor: what helps or hurts offloading here\n" + format_checks(run_checks()))
        # The plan of the generation below, as `kvspill plan --max-model-len 2048` gives it: the
        # engine on this CPU (its measured rates) where there is no GPU.
        _, plans, header = plans_for_flags(None, {"max_model_len": QUICKSTART_CONTEXT})
        where = "this CPU" if plans["yours"].request.device == "cpu" else "the GPU"
        typer.echo(
            f"\n== 2. plan: the embedded model on {where} at {QUICKSTART_CONTEXT} tokens\n"
            + "\n".join([*header, format_plan_table({"quickstart": plans["yours"]}, with_advice=False)])
        )
        typer.echo("\n== 3. generate: a short answer from the embedded model")
        from kvspill.llm import LLM
        from kvspill.sampling_params import SamplingParams

        llm = LLM(None, max_model_len=QUICKSTART_CONTEXT)
        out = llm.chat([{"role": "user", "content": prompt}], SamplingParams(temperature=0, max_tokens=64))[0]
        typer.echo(out.text)
        typer.echo(
            "\n== next\n"
            "  kvspill serve                      # OpenAI-compatible API on 127.0.0.1:8000\n"
            "  kvspill status                     # what the server runs, its KV tiers\n"
            "  kvspill monitor --url http://127.0.0.1:8000   # live VRAM and KV tiers\n"
            "  kvspill plan MODEL --vram-budget 16GiB --cpu-kv-budget 32GiB --max-model-len 128K\n"
            "  kvspill doctor --calibrate         # measure this host for the planner"
        )
