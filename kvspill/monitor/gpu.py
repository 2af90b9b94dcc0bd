"""Where GPU readings come from: NVML on a real host, any other `GpuSource` (tests script one).

Invariants:
- `open_gpu_source()` never raises: without nvidia-ml-py, a driver or a device it returns
  `(None, reason)` and the monitor runs on host figures alone.
- pynvml is imported lazily, inside `NvmlSource`; importing this module needs nothing.
- Each NVML field is read on its own: a card that does not report power or PCIe throughput
  gives None for that field, not a failed reading.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from kvspill.monitor.snapshot import GpuProcess, GpuReading

T = TypeVar("T")


class GpuSource(Protocol):
    """Reads every visible GPU once per call; `close()` releases the library."""

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


def _try(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except Exception:  # NVML raises NVMLError_NotSupported and friends per field; a None says "unknown"
        return None


def _process_name(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # the process may be gone, or in another PID namespace (containers)
        return "?"


class NvmlSource:
    """GPU readings through NVML (`pip install nvidia-ml-py`)."""

    def __init__(self) -> None:
        import pynvml

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        nv = self._nvml
        found: dict[int, int | None] = {}
        for getter in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            for proc in _try(partial(getter, handle)) or []:
                used = proc.usedGpuMemory if isinstance(proc.usedGpuMemory, int) else None
                found[proc.pid] = used if used is not None else found.get(proc.pid)
        return tuple(GpuProcess(pid, _process_name(pid), used) for pid, used in sorted(found.items()))

    def _read_one(self, index: int, handle: Any) -> GpuReading:
        nv = self._nvml
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        name = nv.nvmlDeviceGetName(handle)
        power_mw = _try(lambda: nv.nvmlDeviceGetPowerUsage(handle))
        limit_mw = _try(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
        util = _try(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
        # NVML reports PCIe throughput in KB/s over a 20 ms window.
        rx_kb = _try(lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_RX_BYTES))
        tx_kb = _try(lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_TX_BYTES))
        return GpuReading(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            total_bytes=int(mem.total),
            used_bytes=int(mem.used),
            temperature_c=_try(lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            utilization_percent=None if util is None else float(util.gpu),
            pcie_rx_bytes_per_s=None if rx_kb is None else rx_kb * 1024.0,
            pcie_tx_bytes_per_s=None if tx_kb is None else tx_kb * 1024.0,
            processes=self._processes(handle),
        )

    def read(self) -> list[GpuReading]:
        return [self._read_one(i, h) for i, h in enumerate(self._handles)]

    def close(self) -> None:
        _try(self._nvml.nvmlShutdown)


def open_gpu_source() -> tuple[GpuSource | None, str | None]:
    """(the NVML source, None), or (None, why there is none)."""
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        source = NvmlSource()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA driver here
        return None, f"NVML unavailable: {e}"
    if not source._handles:
        source.close()
        return None, "NVML found no GPU"
    return source, None
