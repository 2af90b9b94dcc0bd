"""One refresh: read the GPUs, the host and (optionally) the server into a `Snapshot`.

Invariants:
- Every source is injected (GPU source, server probe, clock), so tests run without a GPU,
  a server or real time.
- `sample()` never raises for a source that fails: a GPU read error turns into
  `GpuStatus(available=False, reason=...)` for that refresh, a server error into its reading.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kvspill.monitor.gpu import GpuSource
from kvspill.monitor.host import read_host
from kvspill.monitor.server import ServerProbe
from kvspill.monitor.snapshot import GpuStatus, HostReading, Snapshot


class Sampler:
    def __init__(
        self,
        gpu_source: GpuSource | None,
        gpu_reason: str | None = None,
        server: ServerProbe | None = None,
        clock: Callable[[], float] = time.time,
        host: Callable[[], HostReading] = read_host,
    ) -> None:
        self.gpu_source = gpu_source
        self.gpu_reason = gpu_reason or "no GPU source"
        self.server = server
        self.clock = clock
        self.host = host

    def _gpu(self) -> GpuStatus:
        if self.gpu_source is None:
            return GpuStatus(available=False, reason=self.gpu_reason)
        try:
            return GpuStatus(available=True, devices=tuple(self.gpu_source.read()))
        except Exception as e:  # e.g. NVMLError_GpuIsLost: show it, keep monitoring the host
            return GpuStatus(available=False, reason=f"GPU read failed: {e}")

    def sample(self) -> Snapshot:
        now = self.clock()
        return Snapshot(
            timestamp=now,
            gpu=self._gpu(),
            host=self.host(),
            server=None if self.server is None else self.server.read(now),
        )

    def close(self) -> None:
        if self.gpu_source is not None:
            self.gpu_source.close()
