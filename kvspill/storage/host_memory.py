"""Large pinned host pools, fast: anonymous memory advised for huge pages, first touched by
several threads, then registered with CUDA (`cudaHostRegister`).

Why: `torch.zeros(n, pin_memory=True)` takes the pages one by one in `cudaHostAlloc` and then
writes every byte from one thread: 5.8 s for 8 GiB on an H100 host, about 29 s for the 40 GiB
cpu tier of the W3 setup, most of a server's start. Anonymous pages are zero by the kernel, so
no byte needs writing; touching them from 16 threads with 2 MiB pages and registering the
mapping took 0.42 s for 8 GiB on the same host, and H2D copies from it ran at 49-51 GB/s as from
torch's pinned memory (`.devbench`-measured, 2026-11-26; `bench/results/2026-11-26-h100-startup`).

Invariants: the returned tensor is zeroed and pinned (CUDA sees it as host-registered memory: UVA
kernels and non_blocking copies use it as they use `pin_memory=True` tensors); the
`RegisteredHostBuffer` owns the registration and must outlive every use of the tensor's pinning
(it unregisters when collected or closed; the mapping itself lives as long as any tensor on it).
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import threading

import numpy as np
import torch

logger = logging.getLogger(__name__)

FAST_PIN_MIN_BYTES = 256 * 2**20  # smaller buffers: torch's pinned allocator is fast enough
TOUCH_THREADS = 16


class RegisteredHostBuffer:
    """`nbytes` of zeroed host memory registered with CUDA; `tensor(shape, dtype)` views it."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._map = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        advise = getattr(mmap, "MADV_HUGEPAGE", None)
        if advise is not None:
            try:
                self._map.madvise(advise)
            except OSError:  # no transparent huge pages here: 4 KiB pages, still threaded
                pass
        touch_in_parallel(self._map, min(TOUCH_THREADS, os.cpu_count() or 1))
        self._ptr = np.frombuffer(self._map, dtype=np.uint8).ctypes.data
        err = torch.cuda.cudart().cudaHostRegister(self._ptr, nbytes, 0)  # default: mapped, portable
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister of {nbytes} bytes failed with CUDA error {int(err)}")
        self._registered = True

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.frombuffer(self._map, dtype=torch.uint8).view(dtype).view(shape)

    def close(self) -> None:
        if getattr(self, "_registered", False):
            self._registered = False
            torch.cuda.cudart().cudaHostUnregister(self._ptr)

    def __del__(self) -> None:
        self.close()


def touch_in_parallel(buffer: mmap.mmap, threads: int) -> None:
    """Fault every page of `buffer` in from `threads` threads (writing the zeros they hold)."""
    arr = np.frombuffer(buffer, dtype=np.uint8)
    step = -(-len(arr) // max(1, threads))
    workers = [
        threading.Thread(target=arr[i * step : (i + 1) * step].fill, args=(0,)) for i in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def nbytes_of(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def pinned_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, RegisteredHostBuffer]:
    """A zeroed pinned tensor and the buffer that owns its registration (keep it alive)."""
    owner = RegisteredHostBuffer(nbytes_of(shape, dtype))
    return owner.tensor(shape, dtype), owner
