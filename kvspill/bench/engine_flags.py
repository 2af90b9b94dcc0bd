"""The engine flags of the benchmark scripts: the product's flag set (`kvspill.options`), on argparse.

`python -m kvspill.bench` and its siblings (`concurrent_bench`, `prefix_bench`, `mixed_bench`,
`profile_decode`) take the engine settings they vary under the names, parsers and help texts of
`kvspill serve` (docs/flags.md): `--vram-budget 16GiB`, `--max-num-batched-tokens 4K`,
`--cpu-kv-budget 40GiB`, `--hot-window-tokens 1K`. There is no second dialect: a command line
moves between a benchmark and the product unchanged.

Invariants:
- Only flags of `EngineOptions` can be added (`add_engine_flags` refuses another name), and each
  sets the `EngineConfig` field the product's flag sets (`engine_kwargs`).
- Text is read by the flag's own parser (`parse_size`: a unit is required; `parse_tokens`: 128K;
  the layer list) or its type, as the product reads it; a bad value is argparse's `error:` line.
- A script picks the flags it takes and their defaults: a benchmark's default may differ from the
  engine's (4096-token chunks, 16-token blocks), and its help says so. A text default is read as
  typed text is ("16GiB" becomes bytes).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, get_args, get_type_hints

from kvspill.errors import InvalidParameterError
from kvspill.options import EngineOptions, config_field, flag_meta, flag_name
from kvspill.plan.units import parse_tokens

REQUIRED = object()  # as a default: the flag must be given
_ADDED = "engine_flag_names"  # where the parsed namespace lists the engine flags its parser took
# `int | None` -> int: what a flag's text is when it has no parser of its own
_KINDS: dict[str, type] = {
    name: next(t for t in get_args(hint) if t is not type(None))
    for name, hint in get_type_hints(EngineOptions).items()
}


def _reader(name: str) -> Callable[[str], Any]:
    """An argparse type reading flag `name` as the product does."""
    parse, kind, flag = flag_meta(name)["parse"], _KINDS[name], flag_name(name)

    def read(text: str) -> Any:
        try:
            return parse(text, flag) if parse is not None else kind(text)
        except (InvalidParameterError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    read.__name__ = flag  # argparse names the type in its messages
    return read


def token_count(text: str) -> int:
    """An argparse type for a benchmark's own token counts (`--ctx 8192 32K 1M`), read as the
    engine's token flags are."""
    try:
        return parse_tokens(text, "token count")
    except InvalidParameterError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def add_engine_flags(ap: argparse.ArgumentParser, **defaults: Any) -> None:
    """Add these engine flags with these defaults (`vram_budget=REQUIRED,
    max_num_batched_tokens="4096"`); None leaves the engine's own default. A boolean flag comes as
    the product's pair, `--async-scheduling / --no-async-scheduling`."""
    for name, default in defaults.items():
        what = flag_meta(name)["what"]  # a KeyError here: not an engine flag, a second dialect
        if _KINDS[name] is bool:
            action = argparse.BooleanOptionalAction
            ap.add_argument(flag_name(name), dest=name, action=action, default=default, help=what)
            continue
        required = default is REQUIRED
        shown = "" if required or default is None else f" (benchmark default: {default})"
        kwargs: dict[str, Any] = {"required": True} if required else {"default": default}
        ap.add_argument(flag_name(name), dest=name, type=_reader(name), help=what + shown, **kwargs)
    ap.set_defaults(**{_ADDED: [*(ap.get_default(_ADDED) or []), *defaults]})


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig keyword arguments of the engine flags the script's parser took (as parsed)."""
    return {config_field(name): getattr(args, name) for name in getattr(args, _ADDED, [])}
