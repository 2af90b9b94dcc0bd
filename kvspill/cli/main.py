"""The `kvspill` command line: generate, chat, plan.

Every user error (a KvspillError) prints one line saying what to change and exits 2; no
traceback from deep inside. Engine options are the same flags everywhere (`kvspill/options.py`, shown to typer by
`cli/engine_options.py`).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer

from kvspill.cli.dialects import DialectCommand
from kvspill.cli.engine_options import ModelOpt, OfflineOpt, local_model, with_engine_options
from kvspill.cli.user_errors import DEBUG_ENV, debug_enabled
from kvspill.cli.user_errors import fail as _fail
from kvspill.errors import KvspillError
from kvspill.options import EngineOptions, engine_kwargs

app = typer.Typer(
    name="kvspill",
    help="Long-context LLM inference on the GPU you have.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


DiskDirOpt = Annotated[str | None, typer.Option(help="Directory of the disk KV tier.")]


def _make_llm(model: str | None, engine: EngineOptions, offline: bool) -> Any:
    from kvspill.cli.startup_display import startup_display
    from kvspill.llm import LLM

    model = local_model(model, offline)  # a hub id not here is pulled first, with its progress bars
    with startup_display():
        return LLM(model, **engine_kwargs(engine))


# `kvspill chat`'s sampling where neither a flag nor the model (--generation-config) sets it
_CHAT_SAMPLING: dict[str, Any] = {"temperature": 0.7, "top_p": 0.95, "top_k": 0}


def _sampling(
    max_tokens: int, temperature: float, top_p: float, top_k: int, seed: int | None, stop: list[str] | None
) -> Any:
    from kvspill.sampling_params import SamplingParams

    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop=tuple(stop or ()),
    )


@app.command(cls=DialectCommand)
@with_engine_options
def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text.")],
    model: ModelOpt = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate.")] = 64,
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    chat: Annotated[bool, typer.Option(help="Wrap the prompt in the model's chat template.")] = False,
    stream: Annotated[bool, typer.Option(help="Print tokens as they come.")] = True,
    offline: OfflineOpt = False,
    *,
    engine: EngineOptions,
) -> None:
    """Generate a completion for PROMPT (on the embedded model unless --model is given)."""
    try:
        params = _sampling(max_tokens, temperature, top_p, top_k, seed, stop)
        llm = _make_llm(model, engine, offline)
        ids: Any = llm.chat_prompt([{"role": "user", "content": prompt}]) if chat else prompt
        final = None
        if stream:
            for out in llm.stream(ids, params):
                sys.stdout.write(out.delta_text)
                sys.stdout.flush()
                final = out
            sys.stdout.write("\n")
        else:
            final = llm.generate([ids], params)[0]
            typer.echo(final.text)
        if final is not None:
            typer.echo(f"[{final.num_output_tokens} tokens, finish_reason={final.finish_reason}]", err=True)
    except KvspillError as e:
        _fail(e)


@app.command("chat", cls=DialectCommand)
@with_engine_options
def chat_cmd(
    model: ModelOpt = None,
    max_tokens: int = 512,
    temperature: Annotated[
        float | None, typer.Option(help="0 = greedy. [default: the model's recommended value, else 0.7]")
    ] = None,
    top_p: Annotated[float | None, typer.Option(help="[default: the model's, else 0.95]")] = None,
    top_k: Annotated[int | None, typer.Option(help="[default: the model's, else off]")] = None,
    seed: int | None = None,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    offline: OfflineOpt = False,
    *,
    engine: EngineOptions,
) -> None:
    """Interactive chat with streaming output and line editing; Ctrl-C stops a reply, /reset clears history."""
    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
    given = {name: value for name, value in given.items() if value is not None}
    try:
        params = _sampling(
            max_tokens, **{**_CHAT_SAMPLING, **given}, seed=seed, stop=None
        )  # checked before loading
        llm = _make_llm(model, engine, offline)
        # the model's recommended values (--generation-config) where no flag is given
        params = replace(params, **{**_CHAT_SAMPLING, **llm.sampling_defaults, **given})
        _check_chat_template(llm, system)
    except KvspillError as e:
        _fail(e)
        return
    from kvspill.cli.chat_session import ChatSession, enable_line_editing

    enable_line_editing()
    typer.echo(
        "kvspill chat: type a message; Ctrl-C stops a reply; /reset clears history; /help; "
        "Ctrl-D, an empty line or /exit quits."
    )
    ChatSession(llm, params, system).run(input, lambda e: typer.echo(f"\nerror: {e}", err=True))


def _check_chat_template(llm: Any, system: str | None) -> None:
    """Before the first prompt: the model has a chat template, and it takes a first turn (with
    the --system message): a KvspillError saying so otherwise."""
    from kvspill.errors import ChatTemplateError

    user = {"role": "user", "content": "Hello"}
    first = [{"role": "system", "content": system}] if system else []
    try:
        llm.chat_prompt([*first, user])
        return
    except ChatTemplateError as e:
        refused = e
    if system:
        try:
            llm.chat_prompt([user])
        except ChatTemplateError:
            pass
        else:
            raise ChatTemplateError(
                f"the model's chat template takes no system message ({refused}): drop --system"
            ) from refused
    raise ChatTemplateError(f"the model's chat template refuses a first turn: {refused}") from refused


@app.command()
def doctor(
    calibrate: Annotated[
        bool,
        typer.Option(
            help="Measure bandwidths (H2D/D2H, HBM, CPU attention, disk) and save them for the planner."
        ),
    ] = False,
    kv_disk_dir: DiskDirOpt = None,
    quick: Annotated[bool, typer.Option(help="Smaller calibration sizes (seconds, less precise).")] = False,
    url: Annotated[
        str | None,
        typer.Option(help="A running server: also smoke-test its KV cache API (as `kvspill kv check`)."),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="KVSPILL_API_KEY", help="Bearer token for --url.")
    ] = None,
) -> None:
    """Check what makes KV offloading work or hurt on this host; --calibrate measures and saves bandwidths."""
    from kvspill.hardware.checks import format_checks, run_checks

    checks = run_checks(kv_disk_dir)
    typer.echo(format_checks(checks))
    if url is not None:  # the seed's test_window_service: the cache API answers (changes nothing)
        from kvspill.cli.kv_cmd import smoke

        for line in smoke(url, api_key):
            typer.echo(line)
    if calibrate:
        from kvspill.hardware.calibrate import run_calibration

        try:
            bw = run_calibration(disk_dir=kv_disk_dir, quick=quick)
        except KvspillError as e:
            _fail(e)
        typer.echo(f"calibration saved ({bw.source}):")
        for name in (
            "hbm_gbs",
            "h2d_gbs",
            "d2h_gbs",
            "stream_gbs",
            "cpu_attn_gbs",
            "host_read_gbs",
            "disk_read_gbs",
            "gpu_tflops",
        ):
            value = getattr(bw, name)
            typer.echo(f"  {name:<14} {'-' if value is None else f'{value:.1f}'}")
        if bw.cpu_attn_layer_s is not None:  # the CPU path's fixed time per layer, beside its rate
            typer.echo(f"  {'cpu_attn_layer':<14} {bw.cpu_attn_layer_s * 1e3:.2f} ms")
        from kvspill.plan.cold_rates import auto_path_summary

        summary = auto_path_summary(bw)
        if summary is not None:
            typer.echo(summary)
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(1)


def _print_version(value: bool) -> None:
    if value:
        version()
        raise typer.Exit()


@app.callback()
def _top_level(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the kvspill version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    """Long-context LLM inference on the GPU you have."""


@app.command()
def version() -> None:
    """Print the kvspill version."""
    from kvspill import __version__

    typer.echo(__version__)


def _register_commands() -> None:
    from kvspill.cli import (
        bench_cmd,
        cache_cmd,
        eval_cmd,
        kv_cmd,
        manager_cmd,
        models_cmd,
        monitor_cmd,
        ops_cmd,
        plan_cmd,
        pull_cmd,
        rag_cmd,
        serve_cmd,
        serve_ray_cmd,
        service_cmd,
    )

    if not any(c.name == "plan" for c in app.registered_commands):
        plan_cmd.register(app)
    monitor_cmd.register(app)  # idempotent
    if not any(c.name == "serve" for c in app.registered_commands):
        serve_cmd.register(app)
    if not any(c.name == "serve-ray" for c in app.registered_commands):
        serve_ray_cmd.register(app)
    ops_cmd.register(app)  # idempotent
    bench_cmd.register(app)  # idempotent
    rag_cmd.register(app)  # idempotent
    service_cmd.register(app)  # idempotent
    models_cmd.register(app)  # idempotent
    cache_cmd.register(app)  # idempotent
    kv_cmd.register(app)  # idempotent
    manager_cmd.register(app)  # idempotent
    eval_cmd.register(app)  # idempotent
    pull_cmd.register(app)  # idempotent


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kvspill").setLevel(logging.INFO)  # the memory plan and pool sizes, before loading
    if "--debug" in sys.argv[1:]:  # anywhere on the line: tracebacks with errors, debug logs
        sys.argv = [a for a in sys.argv if a != "--debug"]
        os.environ[DEBUG_ENV] = "1"
    if debug_enabled():
        logging.getLogger("kvspill").setLevel(logging.DEBUG)
    _register_commands()
    try:
        app()
    except KvspillError as e:  # one a command did not catch itself: still one line
        try:
            _fail(e)
        except typer.Exit as stop:  # outside app(): nothing turns typer's Exit into the exit code
            sys.exit(stop.exit_code)


if __name__ == "__main__":
    main()
