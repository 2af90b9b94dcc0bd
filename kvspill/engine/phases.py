"""Where start-up time goes: named phases, timed, logged once, shown live by the CLI.

`build_engine_parts` runs each step of start-up inside `phases.phase(name)`; the engine logs
`phases.summary()` at info when it is ready ("start-up 6.2 s: load weights 3.1 s, ..."), so a
slow start names its cause. A CLI that wants a live display (`kvspill serve` on a terminal)
registers a listener with `set_listener`: it is called with each phase's name as it begins,
from whatever thread builds the engine (the server builds it in its engine thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PhaseListener = Callable[[str], None]

_lock = threading.Lock()
_listener: PhaseListener | None = None


def set_listener(listener: PhaseListener | None) -> None:
    """Receive each start-up phase's name as it begins (None: stop)."""
    global _listener
    with _lock:
        _listener = listener


def _notify(name: str) -> None:
    with _lock:
        listener = _listener
    if listener is not None:
        listener(name)


class StartupPhases:
    """Durations of the named phases of one engine's start-up, in order."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.durations: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        _notify(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.durations.append((name, time.perf_counter() - t0))

    @property
    def total_seconds(self) -> float:
        return time.perf_counter() - self.started

    def summary(self) -> str:
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.durations if seconds >= 0.05)
        return f"start-up {self.total_seconds:.1f} s: {parts or 'nothing slow'}"
