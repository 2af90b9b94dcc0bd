"""`kvspill manager`: the control server and dashboard that supervise one `kvspill serve`.

Invariants:
- Always behind an API key: `--api-key` / `KVSPILL_MANAGER_API_KEY`, else a random one printed
  once with the dashboard's URL. The child `kvspill serve` gets the same key.
- The child is stopped (SIGTERM, then SIGKILL) when the manager exits.
- Binding beyond loopback logs a warning, as `kvspill serve` does.
- `--probe-ports` is checked before anything starts (a bad list: exit 2 with the message).
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Annotated

import typer

from kvspill.cli.user_errors import refuse_empty_key
from kvspill.errors import KvspillError

logger = logging.getLogger("kvspill.manager")


def manager_command(
    host: Annotated[str, typer.Option(envvar="KVSPILL_MANAGER_HOST", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="KVSPILL_MANAGER_PORT", help="Port of the manager.")] = 8100,
    serve_port: Annotated[int, typer.Option(help="Port the supervised `kvspill serve` binds.")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="KVSPILL_MANAGER_API_KEY", help="Key of the control API (default: a random one)."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar="KVSPILL_DATA_DIR", help="Registry folder (default: the user data dir)."),
    ] = None,
    profile: Annotated[str | None, typer.Option(help="Start serving this saved profile right away.")] = None,
    probe_ports: Annotated[
        str,
        typer.Option(
            help="Ports where the dashboard looks for servers already running on this host "
            "(GET /health and /v1/models), e.g. 8000-8010,9000; --serve-port is always looked at."
        ),
    ] = "8000-8010",
) -> None:
    """Run the control API and web dashboard: start, stop and switch `kvspill serve` from a browser."""
    import uvicorn

    from kvspill.manager.api import create_manager_app
    from kvspill.manager.discovery import parse_ports
    from kvspill.manager.supervisor import ChildSpec, Supervisor
    from kvspill.registry import open_registry

    try:
        ports = parse_ports(probe_ports)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    try:
        registry = open_registry(data_dir)
        if profile is not None:
            registry.profile(profile)
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    refuse_empty_key(api_key, env="KVSPILL_MANAGER_API_KEY")
    key = api_key or secrets.token_urlsafe(24)
    supervisor = Supervisor(registry.path.parent / "logs", registry.path.parent)
    app = create_manager_app(registry, supervisor, key, serve_port, probe_ports=ports)
    if host not in {"127.0.0.1", "localhost", "::1"}:
        logger.warning("the manager listens on %s: anyone with the key can start and stop models", host)
    shown = key if api_key is None else "<your key>"
    typer.echo(f"kvspill manager: http://{host}:{port}/#key={shown}  (registry {registry.path})", err=True)
    if profile is not None:
        supervisor.start(ChildSpec(profile, serve_port, api_key=key))
    uvicorn.run(app, host=host, port=port, log_level="warning")  # its shutdown stops the child


def register(app: typer.Typer) -> None:
    """Add the `manager` command to `app` (idempotent)."""
    if not any(c.name == "manager" for c in app.registered_commands):
        app.command("manager")(manager_command)
