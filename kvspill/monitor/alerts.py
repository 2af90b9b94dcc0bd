"""VRAM alerts with hysteresis, and the session's statistics.

Invariants:
- Per GPU and per level (default 85, 90, 95 %): exactly one alert when used VRAM goes from
  below the level to at or above it. The level re-arms only once usage is back below it, so a
  reading that hovers above a level never repeats its alert.
- A jump over several levels in one refresh raises one alert per level crossed (the log says
  which levels were passed); the caller rings the bell once per refresh, not per alert.
- Time above a level is sample-and-hold: the interval between two updates counts as above
  when the earlier reading was at or above the level. Times are the caller's (no clock here),
  so tests drive it with fake timestamps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_LEVELS: tuple[float, ...] = (85.0, 90.0, 95.0)


@dataclass(frozen=True)
class Alert:
    timestamp: float
    gpu_index: int
    level_percent: float
    used_percent: float

    def message(self) -> str:
        return f"GPU {self.gpu_index}: VRAM {self.used_percent:.1f}% crossed {self.level_percent:.0f}%"


@dataclass
class GpuSession:
    """One GPU's statistics since the monitor started."""

    peak_percent: float = 0.0
    peak_bytes: int = 0
    seconds_above: dict[float, float] = field(default_factory=dict)
    num_alerts: int = 0
    last_timestamp: float | None = None
    last_percent: float | None = None
    armed: dict[float, bool] = field(default_factory=dict)


class AlertTracker:
    def __init__(self, levels: Sequence[float] = DEFAULT_LEVELS) -> None:
        if list(levels) != sorted(levels) or not levels:
            raise ValueError(f"alert levels must be given in rising order, got {list(levels)}")
        self.levels = tuple(float(level) for level in levels)
        self.gpus: dict[int, GpuSession] = {}
        self.alerts: list[Alert] = []

    def update(
        self, timestamp: float, gpu_index: int, used_percent: float, used_bytes: int = 0
    ) -> list[Alert]:
        """Record one reading; returns the alerts it raised (usually none)."""
        s = self.gpus.setdefault(
            gpu_index,
            GpuSession(
                armed={level: True for level in self.levels},
                seconds_above={level: 0.0 for level in self.levels},
            ),
        )
        if s.last_timestamp is not None and s.last_percent is not None and timestamp > s.last_timestamp:
            for level in self.levels:
                if s.last_percent >= level:
                    s.seconds_above[level] += timestamp - s.last_timestamp
        s.last_timestamp, s.last_percent = timestamp, used_percent
        if used_percent > s.peak_percent:
            s.peak_percent, s.peak_bytes = used_percent, used_bytes
        raised = []
        for level in self.levels:
            if used_percent >= level and s.armed[level]:
                s.armed[level] = False
                raised.append(Alert(timestamp, gpu_index, level, used_percent))
            elif used_percent < level:
                s.armed[level] = True
        s.num_alerts += len(raised)
        self.alerts.extend(raised)
        return raised

    def summary(self) -> dict[str, Any]:
        """JSON-ready session statistics: per GPU peak, seconds above each level, alert count."""
        return {
            "levels_percent": list(self.levels),
            "num_alerts": len(self.alerts),
            "gpus": {
                str(i): {
                    "peak_percent": round(s.peak_percent, 2),
                    "peak_bytes": s.peak_bytes,
                    "seconds_above": {f"{level:g}": round(t, 3) for level, t in s.seconds_above.items()},
                    "num_alerts": s.num_alerts,
                }
                for i, s in sorted(self.gpus.items())
            },
        }
