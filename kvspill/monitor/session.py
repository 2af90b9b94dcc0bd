"""A monitoring session: sample, track alerts, log, one refresh at a time.

Invariants:
- `step()` does one refresh and returns what it saw and the alerts it raised; it neither
  sleeps nor prints, so the CLI owns timing and the terminal, and tests drive it directly.
- Every refresh goes to the logger (when there is one) exactly once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict
from typing import Any

from kvspill.monitor.alerts import Alert, AlertTracker
from kvspill.monitor.log import SnapshotLogger
from kvspill.monitor.sampler import Sampler
from kvspill.monitor.snapshot import Snapshot

NUM_RECENT_ALERTS = 8


class MonitorSession:
    def __init__(
        self, sampler: Sampler, tracker: AlertTracker | None = None, logger: SnapshotLogger | None = None
    ) -> None:
        self.sampler = sampler
        self.tracker = tracker or AlertTracker()
        self.logger = logger
        self.recent: deque[Alert] = deque(maxlen=NUM_RECENT_ALERTS)
        self.started: float | None = None
        self.num_refreshes = 0

    def step(self) -> tuple[Snapshot, list[Alert]]:
        snapshot = self.sampler.sample()
        if self.started is None:
            self.started = snapshot.timestamp
        alerts: list[Alert] = []
        for g in snapshot.gpu.devices:
            alerts += self.tracker.update(snapshot.timestamp, g.index, g.used_percent, g.used_bytes)
        self.recent.extend(alerts)
        if self.logger is not None:
            self.logger.write(snapshot, alerts)
        self.num_refreshes += 1
        return snapshot, alerts

    def report(self, snapshot: Snapshot, alerts: list[Alert]) -> dict[str, Any]:
        """The JSON of one refresh: the snapshot, its alerts and the session so far."""
        record = snapshot.to_dict()
        record["alerts"] = [asdict(a) for a in alerts]
        record["session"] = self.tracker.summary() | {"num_refreshes": self.num_refreshes}
        return record

    def close(self) -> None:
        self.sampler.close()
        if self.logger is not None:
            self.logger.close()
