"""This host's CPU as /proc/cpuinfo describes it: one reader for the kernels' build key
(kernels/cpu_build.py), the planner's cache keys and its choice of CPU paths (plan/host_rates.py).
Torch-free; empty values where the file is missing (not Linux) or has no such field."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def _fields() -> dict[str, str]:
    """The first CPU's "key: value" lines (every CPU repeats them)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def cpuinfo(key: str) -> str:
    """The value of /proc/cpuinfo's field `key` ("model name", "flags", ...), "" where absent."""
    return _fields().get(key, "")


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (avx512f, f16c, ...)."""
    return frozenset(cpuinfo("flags").split())
