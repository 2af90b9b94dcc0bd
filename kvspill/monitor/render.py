"""The terminal view: rich renderables built from a `Snapshot`, the alert tracker and recent alerts.

Invariants:
- Pure: builds renderables, prints nothing; `Live` (in the CLI) or a recording `Console` (in
  tests) draws them. The same `render()` serves `--once` and every live refresh.
- Bar colour by used VRAM: green below the first alert level (85 %), yellow below the second
  (90 %), red at or above it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvspill.monitor.alerts import DEFAULT_LEVELS, Alert, AlertTracker
from kvspill.monitor.snapshot import GpuReading, GpuStatus, HostReading, ServerReading, Snapshot
from kvspill.plan.units import format_bytes

BAR_WIDTH = 30


def bar_style(used_percent: float, levels: Sequence[float] = DEFAULT_LEVELS) -> str:
    if used_percent < levels[0]:
        return "green"
    if len(levels) < 2 or used_percent < levels[1]:
        return "yellow"
    return "red"


def usage_bar(used_percent: float, width: int = BAR_WIDTH, levels: Sequence[float] = DEFAULT_LEVELS) -> Text:
    filled = max(0, min(width, round(width * used_percent / 100.0)))
    bar = Text("█" * filled, style=bar_style(used_percent, levels))
    bar.append("░" * (width - filled), style="grey50")
    bar.append(f" {used_percent:5.1f}%", style=bar_style(used_percent, levels))
    return bar


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{format_bytes(value)}/s"


def _gpu_lines(g: GpuReading, levels: Sequence[float]) -> Text:
    """Three lines per GPU (bar, sensors, processes): readable in an 80-column terminal."""
    power = _opt(g.power_w, "{:.0f}")
    if g.power_limit_w is not None:
        power += f"/{g.power_limit_w:.0f}"
    procs = (
        ", ".join(
            f"{p.name}({p.pid}) {format_bytes(p.used_bytes) if p.used_bytes is not None else '?'}"
            for p in g.processes
        )
        or "-"
    )
    text = Text()
    text.append(f"{g.index} {g.name}\n", style="bold")
    text.append_text(usage_bar(g.used_percent, levels=levels))
    text.append(f"  {format_bytes(g.used_bytes)} / {format_bytes(g.total_bytes)}\n")
    text.append(
        f"  {_opt(g.temperature_c, '{:.0f}°C')}  {power} W  util {_opt(g.utilization_percent, '{:.0f}%')}"
        f"  PCIe rx {_rate(g.pcie_rx_bytes_per_s)} tx {_rate(g.pcie_tx_bytes_per_s)}\n"
    )
    text.append(f"  processes: {procs}")
    return text


def gpu_panel(status: GpuStatus, levels: Sequence[float] = DEFAULT_LEVELS) -> RenderableType:
    if not status.available:
        return Panel(Text(f"no GPU: {status.reason}", style="bold yellow"), title="GPU")
    return Panel(Group(*(_gpu_lines(g, levels) for g in status.devices)), title="GPU")


def host_panel(h: HostReading, server: ServerReading | None = None) -> RenderableType:
    ram_percent = 100.0 * h.ram_used_bytes / h.ram_total_bytes if h.ram_total_bytes else 0.0
    lines = Text()
    lines.append(
        f"RAM    {format_bytes(h.ram_used_bytes)} / {format_bytes(h.ram_total_bytes)} "
        f"({ram_percent:.0f}%), {format_bytes(h.ram_available_bytes)} available\n"
    )
    lines.append(
        f"swap   {format_bytes(h.swap_used_bytes)} / {format_bytes(h.swap_total_bytes)}\n",
        style="yellow" if h.swap_used_bytes > 2**30 else "",
    )
    # CUDA's pinned allocations are page-locked by the driver and do not show as Mlocked: the
    # server's cpu tier (allocated pinned at start) is the figure for kvspill's own pool.
    lines.append(f"pinned {'-' if h.pinned_bytes is None else format_bytes(h.pinned_bytes)} mlocked")
    cpu_tier = server.tiers.get("cpu") if server is not None and server.ok else None
    if cpu_tier is not None and cpu_tier.total_bytes:
        lines.append(f" + kvspill cpu tier {format_bytes(cpu_tier.total_bytes)}")
    else:
        lines.append(" (CUDA pinned pools not included)")
    if h.cpu_percent is not None:
        lines.append(f"   CPU {h.cpu_percent:.0f}%")
    return Panel(lines, title="host")


def server_panel(s: ServerReading) -> RenderableType:
    if not s.ok:
        return Panel(Text(f"{s.url}: {s.error}", style="bold red"), title="server")
    table = Table(box=None)
    for column in ("tier", "blocks used / total", "bytes used / total", "prefix cache", "prefix hits"):
        table.add_column(column)
    for name, t in s.tiers.items():
        table.add_row(
            name,
            f"{t.used_blocks} / {t.blocks}",
            f"{format_bytes(t.used_bytes)} / {format_bytes(t.total_bytes)}",
            format_bytes(t.prefix_bytes),
            f"{100 * t.prefix_hit_rate:.0f}%",
        )
    queue = Text(
        f"running {_opt(s.num_running, '{:d}')}  waiting {_opt(s.num_waiting, '{:d}')}  "
        f"block moves {_opt(s.block_moves_per_s, '{:.1f}')}/s  moved {_rate(s.bytes_moved_per_s)}"
        + (f" ({format_bytes(s.bytes_moved_total)} in all)" if s.bytes_moved_total else "")
    )
    return Panel(Group(table, queue), title=f"server {s.url}")


def session_panel(
    tracker: AlertTracker, recent: Sequence[Alert], started: float, now: float
) -> RenderableType:
    lines = Text(f"session {now - started:.0f} s, {len(tracker.alerts)} alerts\n")
    for index, s in sorted(tracker.gpus.items()):
        above = "  ".join(f">={level:g}%: {t:.0f} s" for level, t in s.seconds_above.items())
        lines.append(f"GPU {index}: peak {s.peak_percent:.1f}% ({format_bytes(s.peak_bytes)})  {above}\n")
    for alert in recent:
        stamp = time.strftime("%H:%M:%S", time.localtime(alert.timestamp))
        lines.append(
            f"{stamp} ALERT {alert.message()}\n", style=bar_style(alert.level_percent, tracker.levels)
        )
    lines.rstrip()
    return Panel(lines, title="session")


def render(
    snapshot: Snapshot, tracker: AlertTracker, recent: Sequence[Alert] = (), started: float | None = None
) -> RenderableType:
    parts: list[RenderableType] = [
        gpu_panel(snapshot.gpu, tracker.levels),
        host_panel(snapshot.host, snapshot.server),
    ]
    if snapshot.server is not None:
        parts.append(server_panel(snapshot.server))
    parts.append(
        session_panel(tracker, recent, snapshot.timestamp if started is None else started, snapshot.timestamp)
    )
    return Group(*parts)
