"""Pre-flight checks: what makes KV offloading work or hurt on this host (used by `kvspill doctor`
and printed at engine start).

Each check is a pass, a warning or a failure, with the measured value and the fix. Nothing here
needs a GPU: without one (or without NVML) the GPU checks say so and the rest still run.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

GiB = 2**30


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "pass" | "warn" | "fail" | "info"
    value: str
    fix: str = ""


def _cuda_checks() -> list[Check]:
    try:
        import torch
    except ImportError:
        return [Check("torch", "fail", "not installed", "pip install torch")]
    if not torch.cuda.is_available():
        return [
            Check(
                "CUDA",
                "info",
                "no CUDA GPU visible: the engine runs on the CPU",
                "for GPU speed install a CUDA build of torch and check `nvidia-smi`",
            )
        ]
    props = torch.cuda.get_device_properties(0)
    checks = [
        Check("GPU", "pass", f"{props.name}, {props.total_memory / GiB:.1f} GiB, CUDA {torch.version.cuda}")
    ]
    checks.extend(_pcie_checks())
    return checks


def _pcie_checks() -> list[Check]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return [
            Check("PCIe link", "info", "unknown (nvidia-ml-py not installed)", "pip install nvidia-ml-py")
        ]
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        gen = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)
        width = pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)
        max_gen = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
        max_width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
    except Exception as e:  # NVML errors vary by driver; report, never crash
        return [Check("PCIe link", "info", f"unknown ({e})")]
    value = f"gen {gen} x{width} (card supports gen {max_gen} x{max_width})"
    if width < max_width or gen < max_gen:
        # An idle card may drop its link generation to save power; width does not change.
        status = "warn" if width < max_width else "info"
        return [
            Check(
                "PCIe link", status, value, "seat the card in a full x16 slot; gen drops at idle are normal"
            )
        ]
    return [Check("PCIe link", "pass", value)]


def _memory_checks() -> list[Check]:
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    checks = [
        Check(
            "free RAM",
            "pass" if vm.available > 8 * GiB else "warn",
            f"{vm.available / GiB:.1f} of {vm.total / GiB:.1f} GiB available",
            ""
            if vm.available > 8 * GiB
            else "the cpu KV tier needs RAM: close other programs or use --disk-kv-budget",
        )
    ]
    if sw.used > GiB:
        checks.append(
            Check(
                "swap",
                "warn",
                f"{sw.used / GiB:.1f} GiB in use",
                "pinned KV cannot swap but everything else can: free RAM or lower --cpu-kv-budget",
            )
        )
    else:
        checks.append(Check("swap", "pass", f"{sw.used / GiB:.1f} of {sw.total / GiB:.1f} GiB in use"))
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    locked = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft / 2**20:.0f} MiB"
    checks.append(
        Check(
            "locked-memory limit",
            "info",
            locked,
            "CUDA pins host memory through its driver; if pinning is refused, raise it: "
            "`ulimit -l unlimited` (or LimitMEMLOCK=infinity in a systemd unit)",
        )
    )
    return checks


def _cpu_checks() -> list[Check]:
    cores = os.cpu_count() or 1
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    status = "pass" if allowed >= 8 else "warn"
    checks = [
        Check(
            "CPU cores",
            status,
            f"{allowed} usable of {cores}",
            ""
            if status == "pass"
            else "CPU attention over cold KV peaks near 8 threads; fewer cores slow it",
        )
    ]
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    if len(nodes) > 1:
        checks.append(
            Check(
                "NUMA",
                "warn",
                f"{len(nodes)} nodes",
                "bind the server to the GPU's node: numactl --cpunodebind=N --membind=N kvspill ...",
            )
        )
    else:
        checks.append(Check("NUMA", "pass", f"{max(len(nodes), 1)} node"))
    return checks


def _disk_checks(kv_disk_dir: str | None) -> list[Check]:
    where = kv_disk_dir or tempfile.gettempdir()
    probe = Path(where)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    return [
        Check(
            "disk for the KV tier",
            "pass" if free > 20 * GiB else "warn",
            f"{free / GiB:.1f} GiB free under {where}",
            "" if free > 20 * GiB else "point --kv-disk-dir at a larger (NVMe) disk",
        )
    ]


def run_checks(kv_disk_dir: str | None = None) -> list[Check]:
    return _cuda_checks() + _memory_checks() + _cpu_checks() + _disk_checks(kv_disk_dir)


def format_checks(checks: list[Check]) -> str:
    marks = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "info": "info"}
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"[{marks[c.status]}] {c.name:<{width}}  {c.value}")
        if c.fix and c.status != "pass":
            lines.append(f"       {'':<{width}}  -> {c.fix}")
    return "\n".join(lines)
