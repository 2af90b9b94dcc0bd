"""`kvspill monitor`: a live terminal view of VRAM, host memory and the server's KV tiers.

`--once --json` prints one snapshot for scripts; `--json` alone prints one JSON line per
refresh; otherwise a rich `Live` view refreshes every `--interval` seconds, printing an alert
line (and ringing the bell unless `--quiet`) when used VRAM crosses 85, 90 or 95 %.

Invariants:
- Without a GPU or NVML it still runs, on host figures, and says so (exit 0).
- A server URL that does not answer is shown in the view, never fatal.
- Ctrl-C ends the session cleanly and prints the session statistics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # annotations only: the command imports the monitor when it runs
    from kvspill.monitor.session import MonitorSession

UrlOpt = Annotated[
    str | None, typer.Option(help="kvspill server to read KV tiers from, e.g. http://127.0.0.1:8000.")
]
IntervalOpt = Annotated[float, typer.Option(help="Seconds between refreshes.", min=0.05)]
LogOpt = Annotated[
    Path | None, typer.Option(help="Append every refresh to FILE (.csv -> CSV, else JSON lines).")
]
LogFormatOpt = Annotated[str, typer.Option(help="auto (by suffix), csv or jsonl.")]
QuietOpt = Annotated[bool, typer.Option(help="No terminal bell on alerts.")]
OnceOpt = Annotated[bool, typer.Option(help="One refresh, then exit.")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (one line per refresh) instead of the live view.")
]
CountOpt = Annotated[int, typer.Option(help="Stop after N refreshes (0: run until Ctrl-C).", min=0)]
ApiKeyOpt = Annotated[
    str | None, typer.Option(envvar="KVSPILL_API_KEY", help="The server's --api-key (for --url).")
]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds to wait for the server per request.", min=0.01)]


def _open_session(
    url: str | None, log: Path | None, log_format: str, timeout: float, api_key: str | None
) -> MonitorSession:
    from kvspill.monitor.gpu import open_gpu_source
    from kvspill.monitor.log import SnapshotLogger, resolve_format
    from kvspill.monitor.sampler import Sampler
    from kvspill.monitor.server import ServerProbe
    from kvspill.monitor.session import MonitorSession

    try:
        logger = None if log is None else SnapshotLogger(log, resolve_format(log, log_format))
    except (ValueError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    source, reason = open_gpu_source()
    probe = None if url is None else ServerProbe(url, timeout_s=timeout, api_key=api_key)
    return MonitorSession(Sampler(source, reason, probe), logger=logger)


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _run_json(session: MonitorSession, interval: float, count: int) -> None:
    done = 0
    while count == 0 or done < count:
        tick = time.monotonic()
        snapshot, alerts = session.step()
        typer.echo(json.dumps(session.report(snapshot, alerts)))
        done += 1
        if count == 0 or done < count:
            _sleep_until(tick + interval)


def _run_live(session: MonitorSession, interval: float, count: int, quiet: bool) -> None:
    from rich.console import Console
    from rich.live import Live

    from kvspill.monitor.render import render

    console = Console()
    snapshot, alerts = session.step()
    done = 1
    with Live(
        render(snapshot, session.tracker, list(session.recent), session.started),
        console=console,
        auto_refresh=False,
        transient=False,
    ) as live:
        while True:
            for alert in alerts:
                stamp = time.strftime("%H:%M:%S", time.localtime(alert.timestamp))
                live.console.print(f"[bold red]{stamp} ALERT[/] {alert.message()}")
            if alerts and not quiet:
                live.console.bell()
            live.update(
                render(snapshot, session.tracker, list(session.recent), session.started), refresh=True
            )
            if count and done >= count:
                break
            _sleep_until(time.monotonic() + interval)
            snapshot, alerts = session.step()
            done += 1


def _print_summary(session: MonitorSession) -> None:
    summary = session.tracker.summary()
    typer.echo(f"session: {session.num_refreshes} refreshes, {summary['num_alerts']} alerts", err=True)
    for index, gpu in summary["gpus"].items():
        above = ", ".join(f">={level}%: {t:.0f} s" for level, t in gpu["seconds_above"].items())
        typer.echo(f"  GPU {index}: peak {gpu['peak_percent']:.1f}%; {above}", err=True)


def monitor(
    url: UrlOpt = None,
    interval: IntervalOpt = 1.0,
    log: LogOpt = None,
    log_format: LogFormatOpt = "auto",
    quiet: QuietOpt = False,
    once: OnceOpt = False,
    json_out: JsonOpt = False,
    count: CountOpt = 0,
    timeout: TimeoutOpt = 0.5,
    api_key: ApiKeyOpt = None,
) -> None:
    """Live VRAM monitor: per-GPU bars and alerts, host RAM/pinned/swap, the server's KV tiers."""
    session = _open_session(url, log, log_format, timeout, api_key)
    count = 1 if once else count
    try:
        if json_out:
            _run_json(session, interval, count)
        else:
            _run_live(session, interval, count, quiet)
    except KeyboardInterrupt:
        pass
    finally:
        session.close()
    if not json_out and not once:
        _print_summary(session)


def register(app: typer.Typer) -> None:
    """Add `monitor` to the `kvspill` app (called by cli/main.py)."""
    if not any(c.name == "monitor" for c in app.registered_commands):
        app.command("monitor")(monitor)
