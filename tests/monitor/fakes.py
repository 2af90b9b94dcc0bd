"""Test doubles of the monitor: a scripted GPU source (no GPU, no NVML)."""

from __future__ import annotations

from collections.abc import Sequence

from kvspill.monitor.snapshot import GpuReading


class FakeGpuSource:
    """Scripted readings: one GPU of `total_bytes` walking through `used_percents`, one per read.

    After the script ends the last value repeats. A `GpuSource` for tests without a GPU.
    """

    def __init__(
        self, used_percents: Sequence[float], total_bytes: int = 80 * 2**30, name: str = "Fake GPU"
    ) -> None:
        if not used_percents:
            raise ValueError("FakeGpuSource needs at least one reading")
        self._percents = list(used_percents)
        self._total_bytes = total_bytes
        self._name = name
        self._next = 0

    def read(self) -> list[GpuReading]:
        percent = self._percents[min(self._next, len(self._percents) - 1)]
        self._next += 1
        return [
            GpuReading(
                index=0,
                name=self._name,
                total_bytes=self._total_bytes,
                used_bytes=int(self._total_bytes * percent / 100.0),
                temperature_c=50.0,
                power_w=100.0,
                power_limit_w=300.0,
                utilization_percent=percent,
                pcie_rx_bytes_per_s=0.0,
                pcie_tx_bytes_per_s=0.0,
            )
        ]

    def close(self) -> None:
        pass
