"""A live start-up line on a terminal: which phase the engine is in ("start-up: load weights...").

The engine names its phases (`kvspill.engine.phases`); on a terminal this shows the current one
with a spinner while the engine builds, and the engine's log lines scroll above it. Off a
terminal (logs to a file, CI, systemd) nothing is drawn: the engine's own info line
"start-up 6.2 s: ..." already says where the time went.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from kvspill.engine.phases import set_listener


@contextmanager
def startup_display(enabled: bool | None = None) -> Iterator[None]:
    """While the body builds an engine (in any thread), show its start-up phase on stderr."""
    console = Console(stderr=True)
    if not (console.is_terminal if enabled is None else enabled):
        yield
        return
    status = console.status("start-up", spinner="dots")
    status.start()
    # Log handlers captured the real stderr when logging was configured; point them at the
    # live display's stderr so their lines print above the spinner instead of through it.
    handlers = [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]
    streams = [h.setStream(sys.stderr) for h in handlers]
    set_listener(lambda name: status.update(f"start-up: {name}..."))
    try:
        yield
    finally:
        set_listener(None)
        status.stop()
        for handler, stream in zip(handlers, streams, strict=True):
            if stream is not None:
                handler.setStream(stream)
