"""The engine flags at the command line's edge: `@with_engine_options` shows typer every field of
`kvspill.options.EngineOptions` and packs them back into that object.

A command declares its own options as usual and one keyword-only parameter `engine: EngineOptions`;
the decorator shows typer the engine flags in its place (in their own "Engine options" help
panel, each reading `KVSPILL_<FLAG>` too) and packs them back into that object. The flag set itself,
its defaults and its parsing are `kvspill/options.py` (typer-free); only typer lives here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, TypeVar, get_args, get_type_hints

import typer

from kvspill.options import EngineOptions, default_text, env_var, flag_meta, flag_name, option_names

PANEL = "Engine options"
_R = TypeVar("_R")

# The model of every command that loads one (`generate`, `chat`, the bench suites).
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Local dir, .gguf file or cached HF id (default: embedded SmolLM2-135M-Instruct).",
    ),
]


# Never download (generate, chat, serve): a hub id not on this machine is an error naming `kvspill pull`.
OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline",
        envvar="KVSPILL_OFFLINE",
        help="Never download: a Hugging Face id must already be on this machine (HF_HUB_OFFLINE=1 too).",
    ),
]


RevisionOpt = Annotated[
    str | None,
    typer.Option(
        envvar="KVSPILL_REVISION",
        help="The Hugging Face revision (branch, tag or commit) of a hub MODEL, found or pulled as "
        "that revision (vLLM's flag).",
    ),
]
DownloadDirOpt = Annotated[
    str | None,
    typer.Option(
        envvar="KVSPILL_DOWNLOAD_DIR",
        help="Hugging Face cache folder a hub MODEL is found or pulled in (vLLM's flag; default "
        "HF_HUB_CACHE).",
    ),
]


def local_model(
    model: str | None, offline: bool, revision: str | None = None, download_dir: str | None = None
) -> str | None:
    """`--model` as `resolve_model` finds it on disk: a registry name gives its files, a hub id
    that is not here is pulled (`kvspill pull`'s core) unless `offline`; with `revision` or
    `download_dir`, that revision in that cache folder (its snapshot's path)."""
    from kvspill.registry.pull import ensure_local_model

    return ensure_local_model(model, offline=offline, revision=revision, download_dir=download_dir)


def _parameter(name: str, annotation: Any) -> inspect.Parameter:
    """The typer parameter of flag field `name`: help with its default, `KVSPILL_<FLAG>`, the panel."""
    flag = flag_name(name)
    decls = (f"{flag}/--no-{flag[2:]}",) if bool in get_args(annotation) else ()
    option = typer.Option(
        *decls,
        help=f"{flag_meta(name)['what']} (default: {default_text(name)})",
        envvar=env_var(name),
        show_default=False,
        rich_help_panel=PANEL,
    )
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[annotation, option]
    )


def engine_parameters() -> list[inspect.Parameter]:
    """Every engine flag as a typer-annotated keyword-only parameter (all default None)."""
    hints = get_type_hints(EngineOptions)
    return [_parameter(f.name, hints[f.name]) for f in fields(EngineOptions)]


def with_engine_options(fn: Callable[..., _R]) -> Callable[..., _R]:
    """Give command `fn` every engine flag. `fn` declares `*, engine: EngineOptions`; typer sees
    `fn`'s other parameters followed by the engine flags, and `fn` gets them packed as `engine`."""
    signature = inspect.signature(fn, eval_str=True)
    if "engine" not in signature.parameters:
        raise TypeError(f"{fn.__name__} needs a keyword-only parameter `engine: EngineOptions`")
    own = [p for p in signature.parameters.values() if p.name != "engine"]
    added = engine_parameters()
    clash = {p.name for p in own} & {p.name for p in added}
    if clash:
        raise TypeError(f"{fn.__name__}: {sorted(clash)} are engine flags already")

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> _R:
        engine = EngineOptions(**{name: kwargs.pop(name, None) for name in option_names()})
        return fn(*args, engine=engine, **kwargs)

    params = [*own, *added]
    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__annotations__["return"] = signature.return_annotation
    return command
