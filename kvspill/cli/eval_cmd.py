"""`kvspill eval`: the long-context quality harness (kvspill/eval) for any model and engine setup.

    kvspill eval --lengths 2K 4K 8K --samples 5 --out eval/exact
    kvspill eval --lengths 2K 4K 8K --hot-kv-tokens 256 --cold-attention sparse --out eval/sparse
    kvspill eval --combine eval/exact eval/sparse --out eval/both

The engine flags (the same as `generate` and `serve`) give the configuration under test;
`--engine-arg KEY=VALUE` sets any EngineConfig field that has no flag here (a value is read as
JSON when it parses, else as text). `--hot-kv-tokens N` forces cold KV at short lengths: about N
tokens of each sequence stay on the gpu tier, the rest go to a cpu tier (runner.hot_kv_kwargs).
A flag given explicitly wins over what --hot-kv-tokens would set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvspill.cli.engine_options import with_engine_options
from kvspill.errors import KvspillError
from kvspill.options import EngineOptions, engine_kwargs
from kvspill.plan.units import parse_tokens

DEFAULT_TASKS = ("passkey", "niah_multikey", "variable_tracking", "common_words", "code")


def parse_engine_args(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs -> EngineConfig keyword arguments (JSON values where they parse)."""
    from kvspill.config import EngineConfig

    fields = EngineConfig.__dataclass_fields__
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise typer.BadParameter(f"--engine-arg {item!r}: write KEY=VALUE, e.g. cold_attention=cpu")
        if key not in fields:
            raise typer.BadParameter(
                f"--engine-arg {key}: not an engine setting; choose from {', '.join(sorted(fields))}"
            )
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def _configuration(
    engine: EngineOptions, engine_args: list[str], hot_kv_tokens: str | None, lengths: list[int]
) -> dict[str, Any]:
    from kvspill.config import block_size_of
    from kvspill.eval.runner import hot_kv_kwargs

    given = engine_kwargs(engine)
    given.update(parse_engine_args(engine_args))
    kwargs: dict[str, Any] = {"max_model_len": max(lengths)}
    if hot_kv_tokens is not None:
        block_size = block_size_of(given)
        sinks = int(given.get("num_sink_blocks", 1))
        kwargs.update(
            hot_kv_kwargs(parse_tokens(hot_kv_tokens, "--hot-kv-tokens"), max(lengths), block_size, sinks)
        )
    kwargs.update(given)
    return kwargs


def eval_command(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="Local dir, .gguf file or cached HF id (default: embedded SmolLM2)."
        ),
    ] = None,
    lengths: Annotated[
        list[str] | None, typer.Option(help="Lengths in tokens (prompt + answer), e.g. --lengths 2K 4K 8K.")
    ] = None,
    tasks: Annotated[
        list[str] | None, typer.Option(help=f"Tasks to run (default: all: {', '.join(DEFAULT_TASKS)}).")
    ] = None,
    samples: Annotated[int, typer.Option(help="Samples per task and length.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the generated samples.")] = 0,
    out: Annotated[Path, typer.Option(help="Directory for eval.json and eval.md.")] = Path("eval-results"),
    label: Annotated[str | None, typer.Option(help="Name of this configuration in the tables.")] = None,
    engine_arg: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for any EngineConfig field (repeatable).")
    ] = None,
    hot_kv_tokens: Annotated[
        str | None,
        typer.Option(help="Keep about this many tokens per sequence on the gpu tier, the rest cold."),
    ] = None,
    teacher_forced: Annotated[
        bool, typer.Option(help="Also measure top-1 agreement and KL against exact attention on real text.")
    ] = True,
    combine: Annotated[
        list[Path] | None,
        typer.Option(help="Only render these eval.json files/dirs side by side into --out."),
    ] = None,
    *,
    engine: EngineOptions,
) -> None:
    """Score long-context quality (synthetic tasks, teacher-forced agreement) of a model and engine setup."""
    from kvspill.eval.report import combined_markdown, load_documents, write_report

    try:
        if combine:
            docs = load_documents(list(combine))
            out.mkdir(parents=True, exist_ok=True)
            (out / "eval.md").write_text(combined_markdown(docs))
            typer.echo(f"wrote {out / 'eval.md'}")
            return
        from kvspill.eval.runner import EvalSpec, run_eval

        token_lengths, task_names = lengths_and_tasks(lengths or [], tasks or [], ctx.args)
        if samples < 1:
            raise typer.BadParameter("--samples must be at least 1")
        kwargs = _configuration(engine, engine_arg or [], hot_kv_tokens, token_lengths)
        spec = EvalSpec(task_names, tuple(token_lengths), samples, seed, teacher_forced)
        doc = run_eval(model, kwargs, spec, log=lambda line: typer.echo(line, err=True))
        doc["label"] = label
        json_path, md_path = write_report(doc, out)
    except (KvspillError, ValueError, FileNotFoundError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    typer.echo(md_path.read_text())
    typer.echo(f"wrote {json_path} and {md_path}", err=True)


def lengths_and_tasks(
    lengths: list[str], tasks: list[str], extras: list[str]
) -> tuple[list[int], tuple[str, ...]]:
    """`--lengths 2K 4K 8K --tasks passkey code`: typer gives each option its first value and the
    rest arrive as extra arguments, which are task names or else lengths. Also `--lengths 2K,4K`
    and repeated options. Defaults: 2K 4K 8K, every task."""
    split = lambda items: [t for item in items for t in item.replace(",", " ").split()]  # noqa: E731
    extra_tasks = [t for t in split(extras) if t in DEFAULT_TASKS]
    extra_lengths = [t for t in split(extras) if t not in DEFAULT_TASKS]
    for text in extra_lengths:
        if not text[:1].isdigit():
            raise ValueError(
                f"{text!r} is neither a length (e.g. 8K) nor a task ({', '.join(DEFAULT_TASKS)})"
            )
    return _lengths([*split(lengths), *extra_lengths]), tuple(split(tasks) + extra_tasks) or DEFAULT_TASKS


def _lengths(texts: list[str]) -> list[int]:
    texts = texts or ["2K", "4K", "8K"]
    lengths = [parse_tokens(t, "--lengths") for t in texts]
    if min(lengths) < 1:
        raise ValueError("--lengths must be positive token counts")
    return sorted(set(lengths))


def register(app: typer.Typer) -> None:
    """Add `eval` to `app` (idempotent)."""
    if not any(c.name == "eval" for c in app.registered_commands):
        app.command("eval", context_settings={"allow_extra_args": True})(with_engine_options(eval_command))
