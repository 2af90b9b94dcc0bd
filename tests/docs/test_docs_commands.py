"""The docs' commands work as written: every `kvspill ...` line in README.md and docs/*.md parses
with the CLI as it is (flags exist, values have the right types, subcommands exist), and the ones
that need no GPU, no server, no network and no placeholder run, in process, with exit code 0.

A command is taken from an indented (4-space) block or a ```bash fence; a trailing `\\` joins
lines, `# ...` comments are dropped, `.venv/bin/` is stripped. Lines written as templates
(`[--url ...]`, `start|stop|...`, `KVSPILL_...=` prefixes) are skipped: they are not commands.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Run whole: cheap on the CPU, no server, no GPU, no file the reader must supply.
RUN = {("plan",), ("models", "ls")}
PLACEHOLDER = re.compile(r"\bDIR\b|\bMODEL\b|FILE|\.\.\.|~/|/models/|/nvme/|path/to")


def _blocks(text: str) -> list[str]:
    lines, fenced = [], False
    for raw in text.splitlines():
        if raw.startswith("```"):
            fenced = raw.strip() in ("```bash", "```sh", "```console") and not fenced
            continue
        if fenced or raw.startswith("    "):
            lines.append(raw.strip())
    commands, current = [], ""
    for line in lines:
        current = f"{current} {line}".strip() if current else line
        if current.endswith("\\"):
            current = current[:-1].strip()
            continue
        commands.append(current)
        current = ""
    return commands


def doc_commands() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for line in _blocks(path.read_text()):
            line = re.sub(r"\s+#.*$", "", line).replace(".venv/bin/", "")
            for command in re.split(r"\s*(?:;|&&|&$)\s*", line):  # `cmd &` runs in the background
                if not command.startswith("kvspill ") or "[" in command or "|" in command:
                    continue
                found.append((f"{path.name}: {command}", command))
    return found


def _parse(command: click.Command, args: list[str], parent: click.Context | None, name: str) -> list[str]:
    """Parse like click would before invoking; returns the subcommand path."""
    ctx = command.make_context(name, args, parent=parent)
    # a group by what it does: typer 0.29's groups subclass its vendored click, not click.Group
    if hasattr(command, "resolve_command"):
        rest = [*ctx._protected_args, *ctx.args]
        sub_name, sub, sub_args = command.resolve_command(ctx, rest)
        assert sub is not None and sub_name is not None
        return [sub_name, *_parse(sub, sub_args, ctx, sub_name)]
    return []


COMMANDS = doc_commands()


def test_the_docs_have_commands() -> None:
    assert len(COMMANDS) >= 20
    _register_commands()
    group = typer.main.get_command(app)
    runs = [
        c
        for _, c in COMMANDS
        if "--config" not in c and tuple(_parse(group, shlex.split(c)[1:], None, "k")) in RUN
    ]
    assert len(runs) >= 5, "the cheap commands are found to run (subcommands resolved)"


@pytest.mark.parametrize("where,command", COMMANDS, ids=[w[:90] for w, _ in COMMANDS])
def test_doc_command_parses_and_cheap_ones_run(
    where: str, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSPILL_DATA_DIR", str(tmp_path))  # the registry a run may read or create
    _register_commands()
    args = shlex.split(command)[1:]
    if "--config" in args:  # the reader's file, read as the flags parse: an empty one here
        monkeypatch.chdir(tmp_path)
        (tmp_path / args[args.index("--config") + 1]).write_text("{}\n" if "yaml" in command else "")
    path = tuple(_parse(typer.main.get_command(app), list(args), None, "kvspill"))
    if path in RUN and not PLACEHOLDER.search(command):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{where}\n{result.output}"
