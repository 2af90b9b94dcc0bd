"""The CPU kernels' build: C++ sources compiled on first use with the host's g++ and loaded with ctypes.

Each kernel (`cpu_attention.cpp`, `cpu_decode_ops.cpp`, `cpu_gguf.cpp`) is built with -O3 -march=native -fopenmp (a few
seconds, once per source, flags and CPU) into a per-user cache (KVSPILL_EXT_CACHE), named by a hash
of its source, headers, flags and the CPU's feature flags: -march=native code runs only where it
was built, and an edited source never loads a stale library. It links the OpenMP runtime torch
already loaded. `load_library` returns None, with one warning that says why and what to install,
where it cannot be built; each caller keeps its torch path for that case.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from kvspill.env import env_settings
from kvspill.host_cpu import cpuinfo

logger = logging.getLogger(__name__)

BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")


def cpu_signature() -> str:
    """-march=native code runs only where it was built: the cache key carries the CPU's flags."""
    return platform.machine() + cpuinfo("flags")


def build(compiler: str, source: Path, headers: Sequence[Path], flags: Sequence[str]) -> Path:
    """The library built from `source` (which includes `headers`), from the cache when there."""
    text = source.read_bytes() + b"".join(h.read_bytes() for h in headers)
    key = hashlib.sha256(text + " ".join(flags).encode() + cpu_signature().encode()).hexdigest()[:16]
    target = env_settings().ext_cache_dir / f"{source.stem}-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{source.stem}-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, *flags, str(source), "-o", tmp], check=True, capture_output=True, text=True)
        os.replace(tmp, target)  # atomic: a concurrent builder never loads half a library
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def c_pointer(array: torch.Tensor | np.ndarray) -> ctypes.c_void_p:
    """The address of a tensor's or an array's first element, as a kernel's pointer argument."""
    return ctypes.c_void_p(array.data_ptr() if isinstance(array, torch.Tensor) else array.ctypes.data)


def load_library(
    name: str,
    source: Path,
    headers: Sequence[Path],
    flags: Sequence[str],
    entry_points: Sequence[str],
    without_it: str,
    log: logging.Logger,
) -> ctypes.CDLL | None:
    """The compiled `source`, its `entry_points` returning C ints (status codes), or None, logged
    on `log` with why and `without_it` (what runs instead). Callers cache the result
    (functools.cache), so the warning is said once."""
    compiler = shutil.which("g++")
    if compiler is None:
        why = "no C++ compiler: install g++ (e.g. apt-get install g++) to build it"
    else:
        try:
            lib = ctypes.CDLL(str(build(compiler, source, headers, flags)))
            for entry in entry_points:
                getattr(lib, entry).restype = ctypes.c_int
            return lib
        except (OSError, subprocess.CalledProcessError) as e:
            detail = (getattr(e, "stderr", "") or str(e)).strip().splitlines()[-3:]
            why = f"building it with {compiler} failed: {' / '.join(detail)}"
    log.warning("%s kernel unavailable (%s); %s", name, why, without_it)
    return None
