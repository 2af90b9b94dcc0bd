"""The view: bar colours switch at 85 and 90 %; no GPU, server errors and alerts are shown."""

from __future__ import annotations

import pytest
from rich.console import Console

from kvspill.monitor.alerts import AlertTracker
from kvspill.monitor.render import bar_style, render, usage_bar
from kvspill.monitor.snapshot import GpuStatus, ServerReading, Snapshot

ANSI = {"green": "\x1b[32m", "yellow": "\x1b[33m", "red": "\x1b[31m"}


def _ansi(renderable) -> str:
    console = Console(record=True, force_terminal=True, color_system="standard", width=140)
    console.print(renderable)
    return console.export_text(styles=True)


@pytest.mark.parametrize(
    ("percent", "colour"),
    [(10, "green"), (84.9, "green"), (85, "yellow"), (89.9, "yellow"), (90, "red"), (99, "red")],
)
def test_bar_colour_by_level(percent, colour):
    assert bar_style(percent) == colour
    text = _ansi(usage_bar(percent))
    assert ANSI[colour] in text
    assert all(code not in text for name, code in ANSI.items() if name != colour)


@pytest.mark.parametrize(("percent", "colour"), [(50, "green"), (87, "yellow"), (93, "red")])
def test_snapshot_renders_gpu_bar_in_its_colour(make_session, percent, colour):
    session = make_session([percent])
    snapshot, _ = session.step()
    text = _ansi(render(snapshot, session.tracker, list(session.recent), session.started))
    assert "Fake GPU" in text and f"{percent:.1f}%" in text
    assert ANSI[colour] + "█" in text
    assert "RAM" in text and "swap" in text and "pinned" in text


def test_alerts_and_peak_are_listed(make_session):
    session = make_session([80, 91])
    session.step()
    snapshot, _ = session.step()
    console = Console(record=True, width=140)
    console.print(render(snapshot, session.tracker, list(session.recent), session.started))
    text = console.export_text()
    assert "ALERT GPU 0: VRAM 91.0% crossed 85%" in text and "crossed 90%" in text
    assert "peak 91.0%" in text


def test_no_gpu_and_server_error_are_said(make_session):
    session = make_session([50])
    snapshot, _ = session.step()
    snapshot = Snapshot(
        snapshot.timestamp,
        GpuStatus(False, "NVML unavailable: test"),
        snapshot.host,
        ServerReading("http://x:1", ok=False, error="/v1/kv unreachable: refused"),
    )
    console = Console(record=True, width=140)
    console.print(render(snapshot, AlertTracker()))
    text = console.export_text()
    assert "no GPU: NVML unavailable: test" in text
    assert "http://x:1: /v1/kv unreachable: refused" in text


def test_host_panel_adds_the_servers_pinned_cpu_tier(make_session):
    """CUDA-pinned memory is not Mlocked: with a server, its cpu tier is shown beside it."""
    from kvspill.monitor.snapshot import TierReading

    session = make_session([50])
    snapshot, _ = session.step()
    server = ServerReading(
        "http://x:1",
        ok=True,
        tiers={"cpu": TierReading(10, 2, 40 * 2**30, 8 * 2**30)},
        bytes_moved_total=3 * 2**30,
    )
    console = Console(record=True, width=140)
    console.print(render(Snapshot(snapshot.timestamp, snapshot.gpu, snapshot.host, server), AlertTracker()))
    text = console.export_text()
    assert "+ kvspill cpu tier 40.0 GiB" in text
    assert "(3.0 GiB in all)" in text  # one reading has no rate yet, but the total moved
    console = Console(record=True, width=140)
    console.print(render(snapshot, AlertTracker()))
    assert "(CUDA pinned pools not included)" in console.export_text()
