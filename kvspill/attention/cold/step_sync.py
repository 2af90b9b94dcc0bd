"""Small synchronization helpers of a step's cold paths (`attention/cold/dispatch.py`, `attention/cold/sparse.py`):
`HostReady` waits once per step for the async copies into the cpu pool before the host reads it;
`CopyStream` runs a block of kernels on the storage's copy stream, ordered both ways with the
compute stream; `recorded_event` marks a point of the current stream for another to wait on."""

from __future__ import annotations

from collections.abc import Callable

import torch


class HostReady:
    """Waits once per step for the async copies into the cpu pool (`wait`), before the host first
    reads the pools; shared by a step's paths."""

    def __init__(self, wait: Callable[[], None]) -> None:
        self.wait = wait
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.wait()
            self.done = True


class CopyStream:
    """`with` block whose kernels run on the storage's copy stream, ordered after the compute
    stream's work so far, with the compute stream waiting for them after. The copy stream orders
    these reads of the pinned pool with every host write into it (storage/transfer.py waits for that
    stream before one). Without a stream (off CUDA) the block runs in place."""

    def __init__(self, stream: torch.cuda.Stream | None, device: torch.device) -> None:
        self.stream = stream
        self.device = device
        self._ctx: torch.cuda.StreamContext | None = None

    def __enter__(self) -> torch.cuda.Stream | None:
        if self.stream is None:
            return None
        self.compute = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(self.compute)
        self._ctx = torch.cuda.stream(self.stream)
        self._ctx.__enter__()
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is None or self._ctx is None:
            return
        self._ctx.__exit__(*exc)
        self.compute.wait_stream(self.stream)


def recorded_event() -> torch.cuda.Event:
    """An event recorded now on the current CUDA stream (a CUDA graph captures it as an edge)."""
    event = torch.cuda.Event()
    event.record()
    return event
