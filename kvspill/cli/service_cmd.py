"""`kvspill service install|start|stop|restart|status|logs|uninstall`: `kvspill serve` as a systemd unit.

Invariants:
- `install` checks the serve arguments the way the service will run them (the same interpreter,
  `--print-config`, without this shell's KVSPILL_* variables, which systemd would not pass on)
  before it writes anything; a bad flag or config file is the server's own `error:` line, exit 2.
- The unit's stop timeout is the resolved `--shutdown-timeout` plus a margin (`cli/systemd_unit.py`).
- The other verbs are systemctl / journalctl with `--user` when asked; their exit status is ours
  (`status` exits 3 for a stopped unit, as systemctl does). Without systemctl on PATH: one line, exit 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Annotated

import typer

from kvspill.cli.systemd_unit import (
    UnitSpec,
    check_name,
    default_environment_file,
    render_unit,
    unit_path,
)

service_app = typer.Typer(
    name="service",
    help="Run `kvspill serve` as a systemd service: install, start, stop, restart, status, logs, uninstall.",
    no_args_is_help=True,
)

UserOpt = Annotated[
    bool,
    typer.Option("--user", help="A user unit (systemctl --user): no root needed; see docs/deployment.md."),
]
NameOpt = Annotated[str, typer.Option("--name", help="Unit name (NAME.service).")]
UnitDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--unit-dir",
        help="Write (or remove) the unit file here and run no systemctl, e.g. for a package or an image "
        "(default: /etc/systemd/system, or ~/.config/systemd/user with --user, then daemon-reload).",
        file_okay=False,
    ),
]
DEFAULT_NAME = "kvspill"


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _name(name: str) -> str:
    try:
        return check_name(name)
    except ValueError as e:
        raise _fail(str(e), 2) from e


def _unit_dir(user_mode: bool, given: Path | None) -> Path:
    if given is not None:
        return given
    if not user_mode:
        return Path("/etc/systemd/system")
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "systemd" / "user"  # the user manager's own search path


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise _fail(
            f"{name} not found on PATH: this host does not run systemd; run `kvspill serve` "
            "directly or the container image (docs/deployment.md)"
        )
    return found


def _systemctl(user_mode: bool, *args: str) -> int:
    argv = [_tool("systemctl"), *(["--user"] if user_mode else []), *args]
    return subprocess.run(argv, check=False).returncode


def _run_systemctl(user_mode: bool, *args: str) -> None:
    code = _systemctl(user_mode, *args)
    if code != 0:
        raise typer.Exit(code)


def _kvspill_command() -> tuple[str, ...]:
    # absolute() and not resolve(): a venv's python is a symlink, and resolving it leaves the venv.
    return (str(Path(sys.executable).absolute()), "-m", "kvspill")


def _environment_file_settings(path: Path) -> dict[str, str]:
    """The KVSPILL_* lines of an EnvironmentFile (KEY=VALUE, # comments, optional quotes), as
    systemd passes them; none when the file is missing or unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    settings = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.startswith("KVSPILL_"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            settings[key.strip()] = value
    return settings


def _resolved_shutdown_timeout(
    command: tuple[str, ...], serve_args: list[str], environment_file: Path
) -> float:
    """Run `kvspill serve ARGS --print-config` as the service would (with the EnvironmentFile's
    KVSPILL_* settings, e.g. KVSPILL_SHUTDOWN_TIMEOUT, as it stands now): exit as it does on a bad
    argument; else its --shutdown-timeout."""
    shell_only = sorted(k for k, v in os.environ.items() if k.startswith("KVSPILL_") and v)
    if shell_only:
        typer.echo(
            f"warning: {', '.join(shell_only)} set in this shell will not reach the service: pass them "
            "as flags after --, in a --config file, or in the unit's EnvironmentFile",
            err=True,
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPILL_")}
    env.update(_environment_file_settings(environment_file))
    argv = [*command, "serve", *serve_args, "--print-config"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        typer.echo(result.stderr.rstrip() or f"error: `kvspill serve` exited {result.returncode}", err=True)
        raise typer.Exit(result.returncode)
    return float(tomllib.loads(result.stdout)["shutdown-timeout"])


@service_app.command()
def install(
    serve_args: Annotated[
        list[str] | None, typer.Argument(help="`kvspill serve` arguments, after `--` (MODEL and flags).")
    ] = None,
    user: UserOpt = False,
    name: NameOpt = DEFAULT_NAME,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the unit; write and run nothing.")
    ] = False,
    run_as: Annotated[
        str | None, typer.Option("--run-as", help="User= of a system unit (default: root).")
    ] = None,
    unit_dir: UnitDirOpt = None,
) -> None:
    """Write a systemd unit that runs `kvspill serve SERVE_ARGS`, then daemon-reload and enable it.

    Example: kvspill service install --user -- /models/llama.gguf --port 8000 --cpu-kv-budget 32GiB
    """
    bare = _name(name)
    if run_as is not None and user:
        raise _fail("--run-as is for system units; a --user unit runs as you", 2)
    text = render_unit(_unit_spec(bare, user, list(serve_args or []), run_as))
    if dry_run:
        typer.echo(text, nl=False)
        return
    if unit_dir is None:
        _tool("systemctl")  # before writing: a unit on a host without systemd helps no one
    path = unit_path(_unit_dir(user, unit_dir), bare)
    existed = _write_unit(path, text)
    typer.echo(f"{'replaced' if existed else 'wrote'} {path}")
    if unit_dir is None:
        _run_systemctl(user, "daemon-reload")
        _run_systemctl(user, "enable", f"{bare}.service")
    flags = " --user" * user + (f" --name {bare}" if bare != DEFAULT_NAME else "")
    typer.echo(f"start it: kvspill service start{flags}; follow it: kvspill service logs{flags} -f")
    if user:
        typer.echo("to keep it running when you log out: loginctl enable-linger $USER")


def _unit_spec(bare: str, user: bool, args: list[str], run_as: str | None) -> UnitSpec:
    """The unit of `kvspill serve ARGS` as this interpreter runs it; the arguments are checked by
    running them (`--print-config`) first, and an `--api-key` among them is warned about."""
    from kvspill import __version__

    command = _kvspill_command()
    environment_file = default_environment_file(bare, user)
    spec = UnitSpec(
        name=bare,
        user_mode=user,
        command=command,
        serve_args=tuple(args),
        working_directory=str(Path.cwd()),
        shutdown_timeout_s=_resolved_shutdown_timeout(
            command, args, Path(environment_file.replace("%h", str(Path.home())))
        ),
        environment_file=environment_file,
        run_as=run_as,
        version=__version__,
    )
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        typer.echo(
            f"warning: unit files are world-readable: put KVSPILL_API_KEY=... in {spec.environment_file} "
            "(mode 600) rather than --api-key",
            err=True,
        )
    return spec


def _write_unit(path: Path, text: str) -> bool:
    """Write the unit file (its folder too); whether one was there before. Exit 1 when not allowed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        path.write_text(text)
    except PermissionError as e:
        raise _fail(
            f"cannot write {path}: permission denied (run it as root, or install a --user unit)"
        ) from e
    return existed


@service_app.command()
def start(user: UserOpt = False, name: NameOpt = DEFAULT_NAME) -> None:
    """Start the service (systemctl start)."""
    _run_systemctl(user, "start", f"{_name(name)}.service")


@service_app.command()
def stop(user: UserOpt = False, name: NameOpt = DEFAULT_NAME) -> None:
    """Stop the service: it drains (--shutdown-timeout), then exits; returns when it has."""
    _run_systemctl(user, "stop", f"{_name(name)}.service")


@service_app.command()
def restart(user: UserOpt = False, name: NameOpt = DEFAULT_NAME) -> None:
    """Restart the service (drain, then start): how a changed config file or EnvironmentFile applies."""
    _run_systemctl(user, "restart", f"{_name(name)}.service")


@service_app.command()
def status(user: UserOpt = False, name: NameOpt = DEFAULT_NAME) -> None:
    """systemctl status of the service (exit 3 when it is not running)."""
    _run_systemctl(user, "status", "--no-pager", f"{_name(name)}.service")


@service_app.command()
def logs(
    user: UserOpt = False,
    name: NameOpt = DEFAULT_NAME,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many recent lines.")] = 100,
    since: Annotated[str | None, typer.Option(help="journalctl --since, e.g. '1 hour ago'.")] = None,
) -> None:
    """The service's log (journalctl)."""
    unit = f"{_name(name)}.service"
    # --user-unit reads the user's unit wherever journald stored it (the system journal when
    # user journals are not persistent); -u would look in the system's units.
    argv = [_tool("journalctl"), *(["--user-unit", unit] if user else ["-u", unit])]
    argv += [
        "--no-pager",
        "-n",
        str(lines),
        *(["-f"] if follow else []),
        *(["--since", since] if since else []),
    ]
    try:
        code = subprocess.run(argv, check=False).returncode
    except KeyboardInterrupt:  # Ctrl-C ends -f
        code = 0
    if code != 0:
        raise typer.Exit(code)


@service_app.command()
def uninstall(user: UserOpt = False, name: NameOpt = DEFAULT_NAME, unit_dir: UnitDirOpt = None) -> None:
    """Stop and disable the service, remove its unit file, daemon-reload."""
    bare = _name(name)
    path = unit_path(_unit_dir(user, unit_dir), bare)
    if not path.exists():
        raise _fail(f"no unit file at {path} (was it installed with{'out' * user} --user?)")
    if unit_dir is None:
        _run_systemctl(user, "disable", "--now", f"{bare}.service")
    path.unlink()
    typer.echo(f"removed {path}")
    if unit_dir is None:
        _run_systemctl(user, "daemon-reload")


def register(app: typer.Typer) -> None:
    """Add the `service` group to `app`."""
    if not any(g.name == "service" for g in app.registered_groups):
        app.add_typer(service_app)
