"""Monitor test fixtures: a fake clock and host, and sessions on a scripted GPU (no GPU, no server)."""

from __future__ import annotations

import pytest

from kvspill.monitor.log import SnapshotLogger
from kvspill.monitor.sampler import Sampler
from kvspill.monitor.server import ServerProbe
from kvspill.monitor.session import MonitorSession
from kvspill.monitor.snapshot import HostReading

from .fakes import FakeGpuSource

GiB = 2**30
WALK = [80, 86, 87, 91, 96, 84, 86]


class FakeClock:
    def __init__(self, start: float = 1_000.0, step: float = 1.0) -> None:
        self.now, self.step = start - step, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def fake_host() -> HostReading:
    return HostReading(
        ram_total_bytes=64 * GiB,
        ram_used_bytes=16 * GiB,
        ram_available_bytes=48 * GiB,
        swap_total_bytes=8 * GiB,
        swap_used_bytes=0,
        pinned_bytes=GiB,
        cpu_percent=5.0,
    )


def fake_session(
    percents: list[float], logger: SnapshotLogger | None = None, server: ServerProbe | None = None
) -> MonitorSession:
    sampler = Sampler(
        FakeGpuSource(percents, total_bytes=80 * GiB), server=server, clock=FakeClock(), host=fake_host
    )
    return MonitorSession(sampler, logger=logger)


@pytest.fixture
def make_session():
    return fake_session
