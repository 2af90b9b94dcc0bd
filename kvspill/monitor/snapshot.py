"""What one refresh of `kvspill monitor` saw: plain dataclasses, no I/O.

Invariants:
- Sizes are bytes (`*_bytes`), rates are per second, fractions are 0..1, percentages are 0..100
  (`*_percent`), temperatures degrees Celsius, power watts, time Unix seconds.
- A figure the source could not read is None, never 0: "unknown" and "idle" stay apart.
- `Snapshot.to_dict()` is the one JSON shape (for `--once --json` and JSON-lines logs);
  `flat_row()` is the one CSV shape, one row per refresh.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: int | None


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    total_bytes: int
    used_bytes: int
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    utilization_percent: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def used_percent(self) -> float:
        return 100.0 * self.used_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True)
class GpuStatus:
    """`available` is False with a `reason` when there is no NVML, no driver or no device."""

    available: bool
    reason: str | None = None
    devices: tuple[GpuReading, ...] = ()


@dataclass(frozen=True)
class HostReading:
    ram_total_bytes: int
    ram_used_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    pinned_bytes: int | None  # Mlocked in /proc/meminfo; None off Linux
    cpu_percent: float | None = None


@dataclass(frozen=True)
class TierReading:
    blocks: int
    used_blocks: int
    total_bytes: int
    used_bytes: int
    prefix_bytes: int = 0  # blocks findable by prefix hash (in use or cached-free)
    prefix_hit_rate: float = 0.0  # prompt tokens found in this tier / tokens looked up, since start


@dataclass(frozen=True)
class ServerReading:
    """The server's KV tiers and queue; `ok` False with `error` when it could not be read."""

    url: str
    ok: bool
    error: str | None = None
    tiers: dict[str, TierReading] = field(default_factory=dict)
    num_running: int | None = None
    num_waiting: int | None = None
    num_requests: int | None = None
    block_moves_per_s: float | None = None  # None on the first reading: a rate needs two
    bytes_moved_per_s: float | None = None
    bytes_moved_total: int | None = None  # since the server started, every direction


@dataclass(frozen=True)
class Snapshot:
    timestamp: float
    gpu: GpuStatus
    host: HostReading
    server: ServerReading | None = None

    def to_dict(self) -> dict[str, Any]:
        gpu = asdict(self.gpu)
        for dev, reading in zip(gpu["devices"], self.gpu.devices, strict=True):
            dev["used_percent"] = round(reading.used_percent, 2)
        return {
            "timestamp": self.timestamp,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.timestamp)),
            "gpu": gpu,
            "host": asdict(self.host),
            "server": None if self.server is None else asdict(self.server),
        }

    def flat_row(self) -> dict[str, Any]:
        """One CSV row: host figures, then `gpu{i}_*` per device, then `server_*` and `kv_{tier}_*`."""
        row: dict[str, Any] = {
            "timestamp": round(self.timestamp, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.timestamp)),
        }
        row.update({f"host_{k}": v for k, v in asdict(self.host).items()})
        row["gpu_available"] = self.gpu.available
        for g in self.gpu.devices:
            p = f"gpu{g.index}_"
            row.update(
                {
                    p + "used_bytes": g.used_bytes,
                    p + "total_bytes": g.total_bytes,
                    p + "used_percent": round(g.used_percent, 2),
                    p + "temperature_c": g.temperature_c,
                    p + "power_w": g.power_w,
                    p + "utilization_percent": g.utilization_percent,
                    p + "pcie_rx_bytes_per_s": g.pcie_rx_bytes_per_s,
                    p + "pcie_tx_bytes_per_s": g.pcie_tx_bytes_per_s,
                    p + "num_processes": len(g.processes),
                }
            )
        if self.server is not None:
            s = self.server
            row.update(
                {
                    "server_ok": s.ok,
                    "server_error": s.error,
                    "server_num_running": s.num_running,
                    "server_num_waiting": s.num_waiting,
                    "server_block_moves_per_s": s.block_moves_per_s,
                    "server_bytes_moved_per_s": s.bytes_moved_per_s,
                }
            )
            for name in ("gpu", "cpu", "disk"):
                tier = s.tiers.get(name)
                row[f"kv_{name}_used_blocks"] = None if tier is None else tier.used_blocks
                row[f"kv_{name}_blocks"] = None if tier is None else tier.blocks
                row[f"kv_{name}_used_bytes"] = None if tier is None else tier.used_bytes
                row[f"kv_{name}_prefix_bytes"] = None if tier is None else tier.prefix_bytes
                row[f"kv_{name}_prefix_hit_rate"] = None if tier is None else tier.prefix_hit_rate
        return row
