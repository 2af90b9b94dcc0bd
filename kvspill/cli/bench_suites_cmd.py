"""`kvspill bench progressive | stability | compare | all | history`: the benchmark suites
(`kvspill.bench.suites`) and the results they keep.

Each suite command runs against the engine in this process (the same engine flags as `generate`
and `serve`) or against a running server (`--url`; not `all`), shows a progress bar on stderr,
writes its folder (`--out`): results.jsonl, results.csv, PNG plots and report.md, and keeps its
summary in the registry's SQLite (`--keep`, default on) for `bench history`. `all` runs the three
suites in one folder with one report (`suites/full.py`).

Invariants:
- Thin: parse flags, build targets, call the suite, write its folder, keep its summary, choose the
  exit code.
- Exit codes: 2 for bad input (one line saying what to change), 1 when `stability` fails or
  `progressive` fails at its first (smallest) context, else 0 (compare's failures are results;
  a summary the registry could not keep is a warning line).
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
KeepOpt = Annotated[
    bool, typer.Option(help="Keep the run's summary in the registry's SQLite (kvspill bench history).")
]
# progressive's sweep, in `bench progressive` and `bench all`
ContextsOpt = Annotated[
    str | None, typer.Option(help="progressive's contexts, e.g. 4K,8K,16K (default: doubling).")
]
StartContextOpt = Annotated[str, typer.Option(help="First context of progressive's doubling sweep.")]
MaxContextOpt = Annotated[
    str | None,
    typer.Option(help="Last context of the sweep (default: the plan's maximum, within the model length)."),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option(envvar="KVSPILL_DATA_DIR", help="Registry folder for --keep (default: the user data dir)."),
]
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


def _keep(
    keep: bool,
    suite: str,
    infos: list[dict[str, Any]],
    figures: dict[str, Any],
    passed: bool | None,
    out: Path,
    data_dir: Path | None,
) -> list[str]:
    """The registry's line about the run's summary (nothing with --no-keep)."""
    from kvspill.bench.suites.keep import keep as keep_summary
    from kvspill.bench.suites.keep import model_of

    if not keep:
        return []
    named = [i for i in infos if i.get("model") or i.get("url")]
    model = model_of(named[0] if named else {})
    return [keep_summary(suite, model, figures, passed, out, data_dir)]


@with_engine_options
def progressive(
    out: OutOpt = Path("bench-progressive"),
    url: UrlOpt = None,
    api_key: ApiKeyOpt = None,
    contexts: ContextsOpt = None,
    start_context: StartContextOpt = "4K",
    max_context: MaxContextOpt = None,
    new_tokens: NewTokOpt = 32,
    seed: SeedOpt = 0,
    warmup: WarmupOpt = True,
    model: ModelOpt = None,
    keep: KeepOpt = True,
    data_dir: DataDirOpt = None,
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
    kept = _keep(keep, "progressive", [info], suite.figures(result, ctx_list), result.passed, out, data_dir)
    _finish(paths, suite.summary_lines(result, ctx_list) + kept, out)
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
    keep: KeepOpt = True,
    data_dir: DataDirOpt = None,
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
    kept = _keep(keep, "stability", [info], suite.figures(result, cfg), result.passed, out, data_dir)
    _finish(paths, suite.summary_lines(result) + kept, out)
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
    from kvspill.plan.spec import ModelSpec
    from kvspill.plan.units import format_bytes, parse_bytes

    length = config.max_model_len
    if length is None and config.rope_scaling is None:
        length = ModelSpec.from_model_arg(config.model).max_position_embeddings
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
    configs.check_device(names, on_cuda)
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
    keep: KeepOpt = True,
    data_dir: DataDirOpt = None,
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
    kept = _keep(
        keep, "compare", list(result.infos.values()), suite.figures(result, ctx_list), None, out, data_dir
    )
    _finish(paths, _compare_lines(result) + kept, out)


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def _compare_lines(result: Any) -> list[str]:
    """Decode tok/s per configuration and context ("failed" where a run failed), each
    configuration's load and total time, then warnings."""
    from kvspill.bench.suites import compare as suite

    _, decode = suite.pivot(result.rows, "decode_tok_s")
    times = {row["config"]: row for row in suite.config_summary(result)}
    lines = []
    for label, row in decode.items():
        t = times.get(label, {})
        lines.append(
            f"{label}: decode tok/s "
            + ", ".join(f"{c}: {v if v is not None else 'failed'}" for c, v in row.items())
            + f"; load {_or_dash(t.get('load_s'))} s, total {_or_dash(t.get('total_s'))} s"
        )
    return lines + suite.unexercised_warnings(result.rows)


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


@with_engine_options
def all_suites(
    out: Annotated[
        Path,
        typer.Option(
            help="Folder for report.md and the suites' folders: progressive/, stability/, compare/."
        ),
    ] = Path("bench-all"),
    contexts: ContextsOpt = None,
    start_context: StartContextOpt = "4K",
    max_context: MaxContextOpt = None,
    duration: Annotated[float, typer.Option(help="stability: seconds of load.")] = 60.0,
    concurrency: Annotated[int, typer.Option(help="stability: requests in flight at once.")] = 4,
    context_range: Annotated[str, typer.Option(help="stability: prompt lengths MIN:MAX.")] = "512:4K",
    max_rss_growth: Annotated[str, typer.Option(help="stability: largest host-RSS growth.")] = "64MiB",
    max_gpu_growth: Annotated[str, typer.Option(help="stability: largest GPU-memory growth.")] = "64MiB",
    configs_: Annotated[
        str | None,
        typer.Option(
            "--configs", help="compare's configurations (as `bench compare`; default: the presets)."
        ),
    ] = None,
    compare_contexts: Annotated[
        str | None, typer.Option(help="compare's contexts (default: those progressive ran ok).")
    ] = None,
    tier_cap: Annotated[
        str | None, typer.Option(help="compare: upper bound on each configuration's cpu and disk KV tier.")
    ] = None,
    new_tokens: NewTokOpt = 32,
    seed: SeedOpt = 0,
    warmup: WarmupOpt = True,
    model: ModelOpt = None,
    keep: KeepOpt = True,
    data_dir: DataDirOpt = None,
    *,
    engine: EngineOptions,
) -> None:
    """progressive, stability and compare in one run (in process): one folder, one report with plots."""
    from kvspill.bench.suites import full
    from kvspill.bench.suites.report import run_header

    command = _command_line("all", all_suites, {**locals(), **engine.given()})
    try:
        cfg = _stability_config(
            duration, concurrency, context_range, new_tokens, seed, max_rss_growth, max_gpu_growth
        )
        config = engine_config(engine, model)
        compare_names = _compare_names(configs_, config)
        target, ctx_list = _progressive_target(
            contexts, start_context, max_context, new_tokens, model, engine
        )
    except KvspillError as e:
        _fail(e)
    try:
        from kvspill.bench.suites import configs

        configs.check_contexts([cfg.min_ctx, cfg.max_ctx], new_tokens, target.max_model_len)
        given = configs.parse_contexts(compare_contexts, "--compare-contexts") if compare_contexts else None
    except KvspillError as e:
        target.close()
        _fail(e)
    plan = full.FullPlan(ctx_list, new_tokens, cfg, given, seed, warmup)
    build = lambda ctxs: _engine_factories(config, compare_names, ctxs, new_tokens, tier_cap)  # noqa: E731
    header = run_header("all")
    run = full.run_full(target, plan, build, _progress, header)
    paths = full.write_full(out, run, header, command)
    lines = [f"{name}: {line}" for name, line in _full_lines(run)]
    if keep:
        for suite, figures in full.figures(run).items():
            passed = {"progressive": run.progressive.passed, "stability": run.stability.passed}.get(suite)
            lines += _keep(keep, suite, [run.info], figures, passed, out / suite, data_dir)
    typer.echo("\n".join(lines))
    typer.echo(f"report: {out / 'report.md'} ({len(paths)} files in {out})")
    if not run.passed:
        raise typer.Exit(1)


def _full_lines(run: Any) -> list[tuple[str, str]]:
    from kvspill.bench.suites import progressive, stability

    return (
        [("progressive", line) for line in progressive.summary_lines(run.progressive, run.plan.contexts)]
        + [("stability", line) for line in stability.summary_lines(run.stability)[:3]]
        + [("compare", line) for line in _compare_lines(run.compare)]
    )


def _compare_names(configs_: str | None, config: EngineConfig) -> list[str]:
    """compare's configuration names, checked against this config's device before anything runs."""
    from kvspill.bench.suites import configs

    names = configs.parse_config_names(configs_)
    configs.check_device(names, configs.device_plan_bytes(config)[1])
    return names


def _progressive_target(
    contexts: str | None,
    start_context: str,
    max_context: str | None,
    new_tokens: int,
    model: str | None,
    engine: EngineOptions,
) -> tuple[Any, list[int]]:
    """(the in-process target, progressive's contexts): given, else doubling up to what fits."""
    from kvspill.bench.suites import configs
    from kvspill.plan.units import parse_tokens

    given = configs.parse_contexts(contexts) if contexts is not None else None
    start = parse_tokens(start_context, "--start-context")
    largest = parse_tokens(max_context, "--max-context") if max_context is not None else None
    plan_max = configs.plan_max_context(engine_config(engine, model)) if given is None else None
    target = _target(None, None, model, engine)
    try:
        return target, configs.contexts_for(given, start, largest, new_tokens, target.max_model_len, plan_max)
    except KvspillError:
        target.close()
        raise


def history(
    model: Annotated[str | None, typer.Option(help="Only this model (as the runs named it).")] = None,
    suite: Annotated[
        str | None, typer.Option(help="Only this suite: progressive, stability or compare.")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (as GET /api/results).")] = False,
    data_dir: DataDirOpt = None,
) -> None:
    """The suite runs kept in the registry, newest first: date, suite, model, host, verdict, figures."""
    import datetime
    import json

    from kvspill.registry.result_text import headline
    from kvspill.registry.results import list_results
    from kvspill.registry.store import open_registry

    try:
        registry = open_registry(data_dir)
        try:
            results = list_results(registry, model=model, suite=suite, limit=limit)
        finally:
            registry.close()
    except KvspillError as e:
        _fail(e)
    if as_json:
        typer.echo(json.dumps({"results": [r.to_json() for r in results]}, indent=2))
        return
    if not results:
        typer.echo("no results kept yet: run kvspill bench progressive | stability | compare | all")
        return
    verdicts = {True: "pass", False: "FAIL", None: "-"}
    for r in results:
        when = datetime.datetime.fromtimestamp(r.created_at).strftime("%Y-%m-%d %H:%M")
        typer.echo(
            f"{when}  {r.suite:<11}  {r.model}  {r.host}  {verdicts[r.passed]}  {headline(r.suite, r.figures)}"
        )


def register(bench_app: typer.Typer) -> None:
    """Add the suites and `history` to the `bench` group (idempotent)."""
    have = {c.name for c in bench_app.registered_commands}
    for name, fn in (
        ("progressive", progressive),
        ("stability", stability),
        ("compare", compare),
        ("all", all_suites),
        ("history", history),
    ):
        if name not in have:
            bench_app.command(name)(fn)
