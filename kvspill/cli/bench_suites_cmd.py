"""`kvspill bench progressive | stability | compare`: the benchmark suites (`kvspill.bench.suites`).

Each command runs against the engine in this process (the same engine flags as `generate` and
`serve`) or against a running server (`--url`), shows a progress bar on stderr, and writes its
folder (`--out`): results.jsonl, results.csv, PNG plots and report.md.

Invariants:
- Thin: parse flags, build targets, call the suite, write its folder, choose the exit code.
- Exit codes: 2 for bad input (one line saying what to change), 1 when `stability` fails or
  `progressive` fails at its first (smallest) context, else 0 (compare's failures are results).
- torch is imported only for an in-process target (lazily, through the engine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from kvspill.cli.engine_options import ModelOpt, with_engine_options
from kvspill.cli.user_errors import fail as _fail
from kvspill.config import EngineConfig
from kvspill.errors import KvspillError
from kvspill.options import EngineOptions, engine_config

OutOpt = Annotated[
    Path, typer.Option(help="Folder for results.jsonl, results.csv, PNG plots and report.md (created).")
]
UrlOpt = Annotated[str | None, typer.Option(help="Run against this server instead of an in-process engine.")]
ApiKeyOpt = Annotated[str | None, typer.Option(envvar="KVSPILL_API_KEY", help="Bearer token for --url.")]
NewTokOpt = Annotated[int, typer.Option(min=1, help="Output tokens per request (EOS ignored).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the random prompts.")]
WarmupOpt = Annotated[bool, typer.Option(help="One short request before the first measured one.")]
_SECRET = {"api_key"}


def _command_line(name: str, fn: Callable[..., None], options: dict[str, Any]) -> str:
    """The command as run: the flags whose values differ from their defaults, never the API key."""
    import inspect

    parts = [f"kvspill bench {name}"]
    for param in inspect.signature(fn).parameters.values():
        value = options.get(param.name)
        if param.name in _SECRET or value is None or value == param.default or value == []:
            continue
        flag = "--" + param.name.rstrip("_").replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            parts.append(f"{flag} {v}" if not isinstance(v, bool) else (flag if v else f"--no-{flag[2:]}"))
    return " ".join(parts)


@contextmanager
def _progress(description: str, total: float) -> Iterator[Callable[[float], None]]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)
        yield lambda amount: bar.advance(task, amount)


def _target(url: str | None, api_key: str | None, model: str | None, engine: EngineOptions) -> Any:
    """A server at `url`, else an engine of `model` with the flags; its label is the rows' `mode`."""
    from kvspill.bench.suites.configs import mode_of
    from kvspill.bench.suites.targets import EngineTarget
    from kvspill.bench.suites.url_target import UrlTarget

    if url is not None:
        return UrlTarget(url, label="url", api_key=api_key)
    config = engine_config(engine, model)
    return EngineTarget.build(config, label=mode_of(config))


def _finish(paths: list[Path], lines: list[str], out: Path) -> None:
    for line in lines:
        typer.echo(line)
    typer.echo(f"results in {out}: " + ", ".join(p.name for p in paths))


@with_engine_options
def progressive(
    out: OutOpt = Path("bench-progressive"),
    url: UrlOpt = None,
    api_key: ApiKeyOpt = None,
    contexts: Annotated[
        str | None, typer.Option(help="Contexts to run, e.g. 4K,8K,16K (default: doubling).")
    ] = None,
    start_context: Annotated[str, typer.Option(help="First context of the doubling sweep.")] = "4K",
    max_context: Annotated[
        str | None,
        typer.Option(
            help="Last context of the sweep (default: the plan's maximum, within the model length)."
        ),
    ] = None,
    new_tokens: NewTokOpt = 32,
    seed: SeedOpt = 0,
    warmup: WarmupOpt = True,
    model: ModelOpt = None,
    *,
    engine: EngineOptions,
) -> None:
    """Raise the context on one model and configuration until it fails; report the largest stable one."""
    from kvspill.bench.suites import configs
    from kvspill.bench.suites import progressive as suite
    from kvspill.bench.suites.report import run_header
    from kvspill.plan.units import parse_tokens

    command = _command_line("progressive", progressive, {**locals(), **engine.given()})
    try:
        given = configs.parse_contexts(contexts) if contexts is not None else None
        start = parse_tokens(start_context, "--start-context")
        largest = parse_tokens(max_context, "--max-context") if max_context is not None else None
        plan_max = None
        if url is None and given is None:
            plan_max = configs.plan_max_context(engine_config(engine, model))
        target = _target(url, api_key, model, engine)
    except KvspillError as e:
        _fail(e)
        return
    try:
        ctx_list = configs.contexts_for(given, start, largest, new_tokens, target.max_model_len, plan_max)
        base = {**run_header("progressive"), "mode": target.label}
        info = target.info()
        with _progress("progressive", len(ctx_list)) as advance:
            result = suite.run_progressive(
                target, ctx_list, new_tokens, seed=seed, warmup=warmup, advance=advance, base_row=base
            )
    except KvspillError as e:
        _fail(e)
        return
    finally:
        target.close()
    paths = suite.write_results(out, result, ctx_list, info, command)
    _finish(paths, suite.summary_lines(result, ctx_list), out)
    if not result.passed:
        raise typer.Exit(1)


def _context_range(text: str) -> tuple[int, int]:
    from kvspill.errors import InvalidParameterError
    from kvspill.plan.units import parse_tokens

    lo, sep, hi = text.partition(":")
    if not sep:
        lo = hi = text
    try:
        return parse_tokens(lo, "--context-range"), parse_tokens(hi, "--context-range")
    except InvalidParameterError:
        raise InvalidParameterError(
            "context_range", f"--context-range expects MIN:MAX such as 512:4K, got {text!r}"
        ) from None


@with_engine_options
def stability(
    out: OutOpt = Path("bench-stability"),
    url: UrlOpt = None,
    api_key: ApiKeyOpt = None,
    duration: Annotated[float, typer.Option(help="Seconds of load.")] = 60.0,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once (one wave).")] = 4,
    context_range: Annotated[str, typer.Option(help="Prompt lengths MIN:MAX, drawn uniformly.")] = "512:4K",
    max_rss_growth: Annotated[
        str, typer.Option(help="Largest host-RSS growth over the second half.")
    ] = "64MiB",
    max_gpu_growth: Annotated[
        str, typer.Option(help="Largest GPU-memory growth over the second half.")
    ] = "64MiB",
    new_tokens: NewTokOpt = 32,
    seed: SeedOpt = 0,
    model: ModelOpt = None,
    abuse: Annotated[
        int,
        typer.Option(
            help="Abusive requests per wave (aborted, oversized, malformed), beside the load; needs --url."
        ),
    ] = 0,
    *,
    engine: EngineOptions,
) -> None:
    """A mixed load for a duration; pass only with zero errors and no upward memory trend."""
    from kvspill.bench.suites import stability as suite
    from kvspill.bench.suites.report import run_header

    command = _command_line("stability", stability, {**locals(), **engine.given()})
    try:
        cfg = _stability_config(
            duration, concurrency, context_range, new_tokens, seed, max_rss_growth, max_gpu_growth
        )
        if abuse < 0 or (abuse and url is None):
            raise KvspillError("--abuse needs --url (a server to abuse) and a count of 0 or more")
        target = _target(url, api_key, model, engine)
    except KvspillError as e:
        _fail(e)
    result, info = _run_stability(target, cfg, url, api_key, abuse)
    header = {**run_header("stability"), "mode": target.label}
    paths = suite.write_results(out, result, cfg, header, info, command)
    _finish(paths, suite.summary_lines(result), out)
    if not result.passed:
        raise typer.Exit(1)


def _stability_config(
    duration: float,
    concurrency: int,
    context_range: str,
    new_tokens: int,
    seed: int,
    max_rss_growth: str,
    max_gpu_growth: str,
) -> Any:
    """The suite's `StabilityConfig` from the flags (raises InvalidParameterError)."""
    from kvspill.bench.suites import stability as suite
    from kvspill.plan.units import parse_bytes

    lo, hi = _context_range(context_range)
    return suite.StabilityConfig(
        duration,
        concurrency,
        lo,
        hi,
        new_tokens,
        seed=seed,
        max_rss_growth_bytes=parse_bytes(max_rss_growth, "--max-rss-growth"),
        max_gpu_growth_bytes=parse_bytes(max_gpu_growth, "--max-gpu-growth"),
    )


def _run_stability(
    target: Any, cfg: Any, url: str | None, api_key: str | None, abuse: int
) -> tuple[Any, Any]:
    """(the suite's result, the target's info): the load for its duration with `abuse` abusive
    requests per wave beside it; the target and the abuse closed after, exit 2 on bad input."""
    from kvspill.bench.suites import configs
    from kvspill.bench.suites import stability as suite
    from kvspill.bench.suites.abuse import AbuseMix

    mix = AbuseMix(url, api_key) if abuse and url is not None else None
    try:
        configs.check_contexts([cfg.min_ctx, cfg.max_ctx], cfg.new_tokens, target.max_model_len)
        info = target.info()
        with _progress("stability", cfg.duration_s) as advance:
            result = suite.run_stability(target, cfg, advance=advance, abuse=mix, abuse_per_wave=abuse)
    except KvspillError as e:
        _fail(e)
    finally:
        target.close()
        if mix is not None:
            mix.close()
    return result, info


def _engine_factories(
    config: EngineConfig, names: list[str], ctx_list: list[int], new_tokens: int, tier_cap: str | None
) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """(label, factory) per named configuration, and a description of each with its options."""
    from kvspill.bench.suites import configs
    from kvspill.bench.suites.compare import IsolatedEngine
    from kvspill.bench.suites.targets import EngineTarget
    from kvspill.plan.startup import model_spec_for
    from kvspill.plan.units import format_bytes, parse_bytes

    length = config.max_model_len
    if length is None and config.rope_scaling is None:
        length = model_spec_for(config.model).max_position_embeddings
    configs.check_contexts(ctx_list, new_tokens, length)
    cap = parse_bytes(tier_cap, "--tier-cap") if tier_cap is not None else None
    # The engine's start-up plan checks its whole --max-model-len: size the presets for that
    # length (or, when none was given, cap the engines at what the run needs and size for it).
    max_model_len = config.max_model_len
    if max_model_len is None:
        needed = ctx_list[-1] + new_tokens
        max_model_len = -(-needed // config.block_size) * config.block_size
        config = replace(config, max_model_len=max_model_len)
    sizing = configs.host_sizing(max_model_len, cap, config.kv_disk_dir)
    vram, on_cuda = configs.device_plan_bytes(config)
    factories: list[tuple[str, Any]] = []
    descriptions: dict[str, str] = {}
    for name in names:
        changes = configs.config_options(name, config, sizing, vram)
        shown = {k: format_bytes(v) if k.endswith("_bytes") else v for k, v in changes.items()}
        descriptions[name] = f"{configs.CONFIGS[name]}; options {shown}"
        preset_config = replace(config, **changes)
        if on_cuda:
            factories.append((name, IsolatedEngine(preset_config)))
        else:
            factories.append((name, lambda c=preset_config, n=name: EngineTarget.build(c, label=n)))
    return factories, descriptions


@with_engine_options
def compare(
    out: OutOpt = Path("bench-compare"),
    configs_: Annotated[
        str | None,
        typer.Option(
            "--configs",
            help="Comma-separated configurations: default, extended, extreme, offload-off, offload-on, "
            "cpu-attention, stream, cold-cpu, weights-resident, weights-offload (--cpu-offload-gb as "
            "given, else a quarter of the weights; CUDA) (default: the three presets).",
        ),
    ] = None,
    url: Annotated[
        list[str] | None,
        typer.Option(
            help="LABEL=URL of a server to compare (repeatable); replaces the in-process configurations."
        ),
    ] = None,
    api_key: ApiKeyOpt = None,
    contexts: Annotated[str, typer.Option(help="Contexts to run, e.g. 4K,8K,16K.")] = "4K,8K,16K,32K",
    tier_cap: Annotated[
        str | None,
        typer.Option(
            help="Upper bound on each configuration's cpu and disk KV "
            "tier, e.g. 8GiB (the presets otherwise size them for "
            "this host: up to 80% of its RAM)."
        ),
    ] = None,
    new_tokens: NewTokOpt = 32,
    seed: SeedOpt = 0,
    warmup: WarmupOpt = True,
    model: ModelOpt = None,
    *,
    engine: EngineOptions,
) -> None:
    """The same workload under several configurations (or servers), side by side."""
    from kvspill.bench.suites import compare as suite
    from kvspill.bench.suites import configs
    from kvspill.bench.suites.report import run_header

    command = _command_line("compare", compare, {**locals(), **engine.given()})
    try:
        ctx_list = configs.parse_contexts(contexts)
        if url:
            factories, descriptions = _server_factories(url, configs_, api_key, ctx_list, new_tokens)
        else:
            names = configs.parse_config_names(configs_)
            config = engine_config(engine, model)
            factories, descriptions = _engine_factories(config, names, ctx_list, new_tokens, tier_cap)
    except KvspillError as e:
        _fail(e)
    header = run_header("compare")
    with _progress("compare", len(factories) * len(ctx_list)) as advance:
        result = suite.run_compare(
            factories, ctx_list, new_tokens, seed=seed, warmup=warmup, advance=advance, base_row=header
        )
    paths = suite.write_results(out, result, header, descriptions, [], command)
    _finish(paths, _compare_lines(result.rows), out)


def _compare_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Decode tok/s per configuration and context ("failed" where a run failed), then warnings."""
    from kvspill.bench.suites import compare as suite

    _, decode = suite.pivot(rows, "decode_tok_s")
    return [
        f"{label}: decode tok/s "
        + ", ".join(f"{c}: {v if v is not None else 'failed'}" for c, v in row.items())
        for label, row in decode.items()
    ] + suite.unexercised_warnings(rows)


def _server_factories(
    urls: list[str], configs_: str | None, api_key: str | None, ctx_list: list[int], new_tokens: int
) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """(label, factory) per `LABEL=URL` server, each checked against the contexts, and its URL."""
    from kvspill.bench.suites import configs
    from kvspill.bench.suites.url_target import UrlTarget
    from kvspill.errors import InvalidParameterError

    if configs_ is not None:
        raise InvalidParameterError(
            "configs",
            "with --url the configurations are the servers' own: "
            "drop --configs, or drop --url to compare in-process configurations",
        )
    servers = [UrlTarget(u, label=label, api_key=api_key) for label, u in configs.parse_url_labels(urls)]
    for s in servers:
        configs.check_contexts(ctx_list, new_tokens, s.max_model_len)
    factories: list[tuple[str, Any]] = [(s.label, lambda s=s: s) for s in servers]
    return factories, {s.label: s.url for s in servers}


def register(bench_app: typer.Typer) -> None:
    """Add the three suites to the `bench` group (idempotent)."""
    have = {c.name for c in bench_app.registered_commands}
    for name, fn in (("progressive", progressive), ("stability", stability), ("compare", compare)):
        if name not in have:
            bench_app.command(name)(fn)
