"""A value in pinned host memory that a CUDA stream waits for, set by a host thread.

Why: with "cpu" and "split" cold attention the CPU attends a layer's cold blocks while the GPU
runs the rest of it, and the layer's merge needs the CPU's result. Waiting for it on the host
(the main thread blocks until the CPU is done, then launches the merge and the next layer) left
the GPU idle while the host launched each layer: on an H200 host, W3 128K split spent 0.85 ms
of 5.9 per layer between one layer's end and the next one's start (2026-11-27). With this flag
the main thread enqueues "wait until the flag holds v" on the compute stream and goes on
launching; the CPU worker sets v when its result is written, and the GPU goes on by itself.

The wait is the driver's stream memory operation `cuStreamWaitValue64` (no kernel, no SM held),
called through ctypes on libcuda; the flag is an int64 in pinned memory, which the GPU reads
through unified addressing (host pointer = device pointer). Where the driver lacks it,
`StreamFlag.create` returns None and callers wait on the host as before.

Values: a 64-bit count that only grows. Each wait takes the next value and holds until the
flag is at least that value; `set` never lowers it. "At least" rather than "equal": a part
that fails before waiting for its layer's q sets its value early, and an equal-wait for the
layer before would then hold forever (a GPU test hung that way). In normal runs the setter of
value v + 1 sets it only after the GPU has passed the wait for v (it first waits for an event
recorded after that wait: the next layer's q), so no wait passes early. A setter must set its
value even when its work failed (`finally`), or the stream would wait forever; the failure is
raised on the host from the work's future.

The setter must never depend on the thread that enqueues the wait: under CUDA's lazy loading a
kernel's first launch may wait for the device to go idle, so a thread that launches a new kernel
behind a pending wait and only then sets the flag deadlocks (a first version of this module's
GPU test did). The engine's flag is set by the CPU worker, which needs nothing from the main
thread but the GIL, and torch's and Triton's launches and loads let go of it: a first launch
behind a pending wait stalls until the worker is done, it does not deadlock.
`KVSPILL_GPU_WAITS_FOR_CPU=0` turns the flag off: the host waits, as before.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading

import torch

from kvspill.env import switch_on

logger = logging.getLogger(__name__)

_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ


@functools.cache
def _driver_wait() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """cuStreamWaitValue64 (the _v2 entry point of CUDA 12 drivers, else the first one)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for name in ("cuStreamWaitValue64_v2", "cuStreamWaitValue64"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
            fn.restype = ctypes.c_int
            return fn
    return None


class StreamFlag:
    """One flag: `next_value()` on the main thread, `wait(v)` enqueued on the current stream,
    `set(v)` from the thread that finished the work."""

    def __init__(self, device: torch.device, wait_fn: ctypes._CFuncPtr) -> None:  # type: ignore[name-defined]
        self.device = device
        self._wait_fn = wait_fn
        self.cell = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        self._host = self.cell.numpy()  # writes land in the pinned page the GPU polls
        self._value = 0  # the last value handed out
        self._lock = threading.Lock()  # several workers: set() never lowers the flag

    @classmethod
    def create(cls, device: torch.device) -> StreamFlag | None:
        """A flag for `device`'s streams, or None (logged once) where the driver cannot wait on
        host memory; checked by one wait that is already satisfied."""
        if device.type != "cuda" or not switch_on("GPU_WAITS_FOR_CPU"):
            return None
        fn = _driver_wait()
        if fn is None:
            logger.info("libcuda has no cuStreamWaitValue64: CPU cold results are waited for on the host")
            return None
        flag = cls(device, fn)
        try:
            flag.wait(0)  # the cell holds 0: returns at once where the operation is supported
        except RuntimeError as e:
            logger.info("%s: CPU cold results are waited for on the host", e)
            return None
        return flag

    def next_value(self) -> int:
        self._value += 1
        return self._value

    def wait(self, value: int) -> None:
        """Enqueue on the current stream of the flag's device: wait until the flag is >= `value`."""
        stream = torch.cuda.current_stream(self.device)
        rc = self._wait_fn(stream.cuda_stream, self.cell.data_ptr(), value, _WAIT_GEQ)
        if rc != 0:
            raise RuntimeError(f"cuStreamWaitValue64 failed with CUresult {rc}")

    def set(self, value: int) -> None:
        """From any thread, after the work's results are written (x86 keeps stores in order)."""
        with self._lock:
            if value > self._host[0]:
                self._host[0] = value
