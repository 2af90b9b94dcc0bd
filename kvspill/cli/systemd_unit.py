"""The systemd unit of `kvspill service install`: pure text from a `UnitSpec`, no I/O.

Invariants:
- The unit runs `kvspill serve` as given after `--`, from the directory it was installed in (so a
  relative model path means what it meant then), with KVSPILL_* settings from an optional
  EnvironmentFile; systemd does not pass on the installing shell's environment.
- Stop = the server's drain: SIGTERM to the main process only (KillMode=mixed: the server's own
  workers are stopped by it, not under it), then `--shutdown-timeout` for in-flight requests, then
  uvicorn's backstop and the engine's stop; only past TimeoutStopSec does SIGKILL come. A drained
  server exits 0; 143 (128 + SIGTERM, a server that re-raises the signal after draining) and death
  by SIGTERM count as clean too, so neither shows the unit failed nor triggers Restart=on-failure.
- Exit 2 is a bad flag or config file: restarting cannot fix it (RestartPreventExitStatus).
- The pinned CPU KV pool is page-locked memory: LimitMEMLOCK=infinity, or pinning fails at start.
- Every word of ExecStart is quoted for systemd: `%` specifiers and `$` expansion never apply
  to what the user typed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

# After --shutdown-timeout: uvicorn's backstop (2 s, server/lifecycle.py BACKSTOP_S) and the engine
# thread's stop (the pinned pool and GPU memory freed). A margin, not a measurement.
STOP_MARGIN_S = 15
NOFILE_LIMIT = 65536  # the disk KV tier's memory-mapped files, the HTTP connections
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,200}")  # no @: that makes a template
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./:=,+@-]+")


@dataclass(frozen=True)
class UnitSpec:
    """What the unit runs and how."""

    name: str  # unit name without `.service`
    user_mode: bool  # a `systemctl --user` unit (no root; runs while the user is logged in or lingers)
    command: tuple[str, ...]  # the kvspill command, absolute: (python, "-m", "kvspill")
    serve_args: tuple[str, ...]  # the `kvspill serve` arguments, as given after `--`
    working_directory: str
    shutdown_timeout_s: float  # the server's --shutdown-timeout, as resolved at install
    environment_file: str
    run_as: str | None = None  # User= of a system unit; None: root
    version: str = ""


def check_name(name: str) -> str:
    """`name` without a `.service` suffix; raises ValueError saying what a unit name may hold."""
    bare = name.removesuffix(".service")
    if not NAME_PATTERN.fullmatch(bare):
        raise ValueError(
            f"--name {name!r}: a unit name is letters, digits and _ . : - (starting with a letter or digit)"
        )
    return bare


def stop_timeout_s(shutdown_timeout_s: float) -> int:
    """TimeoutStopSec for a server draining for `shutdown_timeout_s`."""
    return math.ceil(shutdown_timeout_s) + STOP_MARGIN_S


def quote_word(word: str) -> str:
    """`word` as one word of a systemd command line (systemd.service(5), "Command lines")."""
    if "\n" in word or "\r" in word or "\0" in word:
        raise ValueError(f"a serve argument cannot hold a line break: {word!r}")
    escaped = word.replace("%", "%%").replace("$", "$$")  # no specifiers, no variable expansion
    if _PLAIN_WORD.fullmatch(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def command_line(words: tuple[str, ...] | list[str]) -> str:
    return " ".join(quote_word(w) for w in words)


def default_environment_file(name: str, user_mode: bool) -> str:
    # %h: the home directory of the user the manager runs for (systemd.unit(5), specifiers).
    return f"%h/.config/kvspill/{name}.env" if user_mode else f"/etc/kvspill/{name}.env"


def unit_path(unit_dir: Path, name: str) -> Path:
    return unit_dir / f"{name}.service"


def render_unit(spec: UnitSpec) -> str:
    """The unit file text."""
    serve = (*spec.command, "serve", *spec.serve_args)
    run_as = [f"User={spec.run_as}"] if spec.run_as else []
    lines = [
        f"# Written by `kvspill service install`{f' (kvspill {spec.version})' if spec.version else ''}.",
        "# Change the serve arguments by installing again; KVSPILL_* settings go in the EnvironmentFile.",
        "[Unit]",
        f"Description=kvspill OpenAI-compatible LLM server ({spec.name})",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=600",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={command_line(serve)}",
        "# Weights and KV tiers are set at start, so nothing reloads in place: a reload checks the",
        "# configuration (printed to the journal; a bad value fails the reload) and `restart` applies it.",
        f"ExecReload={command_line((*serve, '--print-config'))}",
        f"WorkingDirectory={spec.working_directory.replace('%', '%%')}",  # a path, not a command line
        f"EnvironmentFile=-{spec.environment_file}",
        "Environment=PYTHONUNBUFFERED=1",
        *run_as,
        "Restart=on-failure",
        "RestartSec=5",
        "RestartPreventExitStatus=2",
        "LimitMEMLOCK=infinity",
        f"LimitNOFILE={NOFILE_LIMIT}",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        f"# --shutdown-timeout {spec.shutdown_timeout_s:g} s of draining + {STOP_MARGIN_S} s to stop the engine",
        f"TimeoutStopSec={stop_timeout_s(spec.shutdown_timeout_s)}",
        "SuccessExitStatus=143 SIGTERM",
        "NoNewPrivileges=yes",
        "",
        "[Install]",
        f"WantedBy={'default.target' if spec.user_mode else 'multi-user.target'}",
    ]
    return "\n".join(lines) + "\n"
