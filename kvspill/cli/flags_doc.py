"""docs/flags.md, generated from the command line itself: every command's flags with their
environment variable, default and help, the engine flags once.

Invariants:
- The text is a pure function of the typer app: `python -m kvspill.cli.flags_doc > docs/flags.md`
  writes it, and tests/docs/test_flags_doc.py fails when the file differs (a flag added, renamed
  or re-described without regenerating).
- Engine flags (the "Engine options" panel, `cli/engine_options.py`) are listed once, with the
  commands that take them; each command's section lists only its own flags.
- Other servers' flag names are listed once, in "Aliases", from the one table that reads them
  (`cli/dialects.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from kvspill.cli.dialects import ALIASES
from kvspill.cli.engine_options import PANEL as ENGINE_PANEL

HEADER = """# Flags

Generated from the command line by `python -m kvspill.cli.flags_doc > docs/flags.md`; a test fails
when this file is stale. Every flag also reads the environment variable named beside it (the
command line wins), and `kvspill serve` reads any of its flags from a TOML file (`--config`).
"""


# typer carries its own copy of click (typer._click): its classes are matched by their attributes.
Command = Any
Option = Any


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option" and not getattr(param, "hidden", False)


def _commands(group: Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
    if hasattr(group, "commands"):
        for name in sorted(group.commands):
            yield from _commands(group.commands[name], (*path, name))
    elif not getattr(group, "hidden", False):
        yield path, group


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _row(option: Option) -> str:
    names = ", ".join(f"`{n}`" for n in [*option.opts, *option.secondary_opts])
    env = option.envvar if isinstance(option.envvar, str) else ", ".join(option.envvar or ())
    default = option.default
    shown = "" if default is None or callable(default) or default == () else f"`{default}`"
    if option.is_flag and option.secondary_opts and default is not None:
        shown = f"`{'on' if default else 'off'}`"
    return f"| {names} | {f'`{env}`' if env else ''} | {shown} | {_cell(option.help or '')} |"


def _table(options: list[Option]) -> list[str]:
    return ["| flag | environment | default | what it does |", "|---|---|---|---|", *map(_row, options)]


def _is_engine(option: Any) -> bool:
    return getattr(option, "rich_help_panel", None) == ENGINE_PANEL


def _aliases() -> list[str]:
    """The "Aliases" section: every other server's flag kvspill reads, and what it reads it as."""
    rows = [
        f"| {', '.join(f'`{n}`' for n in a.names)} | {a.origin} | {', '.join(sorted(a.commands))} | "
        f"{_cell(a.maps_to)} |"
        for a in ALIASES
    ]
    return [
        "## Aliases",
        "",
        "Flags of vLLM, SGLang and llama-server that kvspill reads as its own (also as keys of a `--config` "
        "file, TOML or vLLM's YAML); each prints a `note:` line saying what it was read as. One given beside "
        "the flag it maps to is refused, as is one that cannot map (the `error:` line says what to use).",
        "",
        "| alias | from | commands | read as |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def render(app: typer.Typer) -> str:
    """The whole docs/flags.md."""
    root = typer.main.get_command(app)
    commands = list(_commands(root))
    engine: dict[str, Option] = {}
    takers: list[str] = []
    sections: list[str] = []
    for path, command in commands:
        options = [p for p in command.params if _is_option(p)]
        own = [p for p in options if not _is_engine(p)]
        if len(own) < len(options):
            takers.append(" ".join(path))
            for p in options:
                if _is_engine(p):
                    engine.setdefault(p.name or "", p)
        arguments = " ".join(
            (p.name or "").upper() for p in command.params if getattr(p, "param_type_name", "") == "argument"
        )
        title = f"## `kvspill {' '.join(path)}{' ' + arguments if arguments else ''}`"
        summary = _cell((command.help or "").split("\n\n")[0])
        body = _table(own) if own else ["No flags of its own."]
        sections.append("\n".join([title, "", summary, "", *body, ""]))
    engine_section = [
        "## Engine options",
        "",
        f"Taken by {', '.join(f'`{t}`' for t in takers)}.",
        "",
        *_table(list(engine.values())),
        "",
    ]
    return "\n".join([HEADER, *engine_section, *_aliases(), *sections]).rstrip() + "\n"


def main() -> None:
    from kvspill.cli.main import _register_commands, app

    _register_commands()
    print(render(app), end="")


if __name__ == "__main__":
    main()
