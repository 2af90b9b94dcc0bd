"""The memory budgets given as flags, checked against what this host has before anything loads:
`--cpu-kv-budget` against the available RAM, `--disk-kv-budget` against the free disk where the
disk tier goes, `--vram-budget` against the card's memory.

Both `kvspill serve` (before it binds its port, `cli/serve_checks.py`) and the engine's pre-flight
(`engine/checks.py`, so `generate`, `chat`, `bench` and the Python API too) call `check_budgets`.
Without it a cpu tier larger than the RAM failed only at its allocation, after the weights
loaded (a 100 GiB tier on a 23.5 GiB host: 27 s, then a 58-line traceback; issue 50).

Invariants: torch-free (serve checks before the engine thread imports torch; torch's view of the
card is used only when torch is imported already); a budget of None or 0 (none, or sized by the
mode from what the host has) is nothing to check; every failure is a KvspillError of one line
naming the flag, its value, what the host has and what to change.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import psutil

from kvspill.config import EngineConfig
from kvspill.errors import DiskTierError, KvspillError

GiB = 2**30


class HostBudgetError(KvspillError):
    """A budget flag asks for more memory than this host has."""


def check_budgets(config: EngineConfig) -> None:
    """Every budget flag of `config` against this host (module docstring)."""
    check_cpu_kv_budget(config.cpu_kv_budget_bytes)
    check_disk_kv_budget(config.kv_disk_dir, config.disk_kv_budget_bytes)
    # tensor parallelism takes cards 0..n-1 under --device cuda; each holds a rank's budget
    cards = (
        [config.device] if ":" in config.device else [f"cuda:{i}" for i in range(config.tensor_parallel_size)]
    )
    for device in cards if config.device != "cpu" else []:
        check_vram_budget(config.vram_budget_bytes, device)


def flag_value(num_bytes: int) -> str:
    """A byte count as the flag takes it back (`100GiB`, `5.8GiB`, `512MiB`, `100TiB`)."""
    for unit, size in (("TiB", 2**40), ("GiB", GiB), ("MiB", 2**20)):
        if num_bytes >= size:
            return f"{num_bytes / size:.2f}".rstrip("0").rstrip(".") + unit
    return f"{num_bytes}B"


def check_cpu_kv_budget(budget_bytes: int | None, available_bytes: int | None = None) -> None:
    if not budget_bytes:
        return
    available = psutil.virtual_memory().available if available_bytes is None else available_bytes
    if budget_bytes > available:
        raise HostBudgetError(
            f"--cpu-kv-budget {flag_value(budget_bytes)} is more than the {available / GiB:.1f} GiB "
            "of RAM available: lower it, or leave it out to size the cpu tier from the RAM"
        )


def check_disk_kv_budget(directory: str | None, budget_bytes: int | None) -> None:
    """The disk tier's directory is writable and has room for the budget."""
    if not budget_bytes:
        return
    where = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        raise DiskTierError(
            f"cannot write the disk KV tier in {where}: {e.strerror or e}: give a writable --kv-disk-dir"
        ) from e
    free = shutil.disk_usage(where).free
    if budget_bytes > free:
        raise DiskTierError(
            f"--disk-kv-budget {flag_value(budget_bytes)} is more than the {free / GiB:.1f} GiB free "
            f"in {where}: lower it, or give a --kv-disk-dir with more space"
        )


def check_vram_budget(budget_bytes: int | None, device: str, card: tuple[int, str] | None = None) -> None:
    """`card`: (total bytes, name) of the card `device` names; read here (`card_memory`) when None."""
    if not budget_bytes or device == "cpu":
        return
    card = card if card is not None else card_memory(device)
    if card is None:
        return  # no card, or none that can be read without starting CUDA: pick_device says so
    total, name = card
    if budget_bytes > total:
        raise HostBudgetError(
            f"--vram-budget {flag_value(budget_bytes)} is more than the {total / GiB:.1f} GiB of "
            f"memory on {name}: lower it, or leave it out to use --gpu-memory-utilization's share"
        )


def card_memory(device: str) -> tuple[int, str] | None:
    """(total bytes, name) of the card `device` ("auto", "cuda", "cuda:N") is, from NVML where
    nvidia-ml-py is installed, else from torch only where it is imported already; None otherwise."""
    index = int(device.partition(":")[2] or 0)
    found = _nvml_card(index)
    if found is None and "torch" in sys.modules:
        found = _torch_card(index)
    return found


def visible_card(index: int, visible: str | None) -> int | str | None:
    """Which NVML card CUDA's device `index` is under CUDA_VISIBLE_DEVICES (`visible`): an NVML
    index, a UUID, or None where CUDA sees no such device (NVML numbers every card on the host)."""
    if visible is None:
        return index
    entries = [e.strip() for e in visible.split(",")]
    if index >= len(entries) or not entries[index] or entries[index] == "-1":
        return None
    entry = entries[index]
    return int(entry) if entry.isdigit() else entry


def _nvml_card(index: int) -> tuple[int, str] | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    card = visible_card(index, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if card is None:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver here: nothing to check
        return None
    try:
        if isinstance(card, int):
            handle = pynvml.nvmlDeviceGetHandleByIndex(card)
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(card)
        total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        name = pynvml.nvmlDeviceGetName(handle)
    except Exception:  # an index past the cards, a MIG slice NVML does not resolve: not ours to judge
        return None
    finally:
        pynvml.nvmlShutdown()
    return total, f"cuda:{index} ({name.decode() if isinstance(name, bytes) else name})"


def _torch_card(index: int) -> tuple[int, str] | None:
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    props = torch.cuda.get_device_properties(index)
    return int(props.total_memory), f"cuda:{index} ({props.name})"
