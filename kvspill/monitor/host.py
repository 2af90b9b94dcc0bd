"""Host memory as the KV tiers see it: RAM, swap, and locked (pinned) memory.

Invariants: never raises for a missing figure (pinned memory is None off Linux); psutil only.
Pinned memory is `Mlocked` from /proc/meminfo: memory locked with mlock. CUDA pins host memory
through its driver, which the kernel may not count there, so the cpu KV tier's bytes (from the
server, when a URL is given) are the better figure for kvspill's own pinned pool.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from kvspill.monitor.snapshot import HostReading


def _mlocked_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("Mlocked:"):
                return int(line.split()[1]) * 1024  # the file says kB and means KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_host() -> HostReading:
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    return HostReading(
        ram_total_bytes=int(vm.total),
        ram_used_bytes=int(vm.total - vm.available),
        ram_available_bytes=int(vm.available),
        swap_total_bytes=int(sw.total),
        swap_used_bytes=int(sw.used),
        pinned_bytes=_mlocked_bytes(),
        cpu_percent=psutil.cpu_percent(interval=None),
    )
