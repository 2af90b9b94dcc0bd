"""An asyncio front over ONE `LLMEngine` driven by its own thread.

Invariants:
- Only the loop thread touches the engine (add/abort/step/kv_stats). Handlers talk to it through
  a thread-safe command queue; results come back to each request's `asyncio.Queue` through
  `loop.call_soon_threadsafe`.
- Each request's queue first receives `ADDED` or an exception (add_request refused it), then its
  `RequestOutput`s; the last one has `finished=True` (or an exception ends it).
- A failing `step()` never kills the loop: every request in flight gets a `StepFailedError` and is
  aborted in the engine; the loop goes on.
- Admission is bounded: at most `max_waiting` requests may wait for their first output; past
  that `submit` raises `ServerBusyError` at once (the HTTP layer answers 503 + Retry-After).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kvspill.outputs import RequestOutput
from kvspill.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

ADDED = object()  # the sentinel put first on a request's queue once the engine accepted it


class ServerBusyError(Exception):
    """The waiting queue is full; retry later."""


class EngineUnavailableError(Exception):
    """The engine is still loading, failed to load, or is shutting down."""


class StepFailedError(Exception):
    """A step raised while this request was in flight; the request was ended."""


@dataclass
class _Tracked:
    aqueue: asyncio.Queue
    arrival: float = field(default_factory=time.monotonic)
    first_output: float | None = None
    last_output: float | None = None


@dataclass
class RequestTimes:
    """Times (monotonic seconds) of one request, for metrics."""

    arrival: float
    first_output: float | None = None


class AsyncEngine:
    """Owns the engine thread. `start()` builds the engine there (via `factory`) and loops."""

    def __init__(self, factory: Callable[[], Any], max_waiting: int = 64,
                 on_output: Callable[[RequestOutput, RequestTimes], None] | None = None) -> None:
        self._factory = factory
        self.max_waiting = max_waiting
        self._on_output = on_output
        self.engine: Any = None
        self.load_error: str | None = None
        self._commands: queue.Queue = queue.Queue()
        self._tracked: dict[str, _Tracked] = {}  # loop thread only
        self._waiting = 0  # admitted, no output yet (event-loop thread only)
        self._ids = itertools.count()
        self._stopping = False
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None

    # ---- lifecycle -----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self._stopping and self.load_error is None

    def start(self, aloop: asyncio.AbstractEventLoop) -> None:
        self._aloop = aloop
        self._thread = threading.Thread(target=self._run, name="kvspill-engine", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def stop_admitting(self) -> None:
        self._stopping = True

    def shutdown(self, timeout: float = 5.0) -> None:
        """Abort whatever is still in flight and stop the thread."""
        self._stopping = True
        self._commands.put(("stop",))
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- the front (event-loop thread) ---------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return self._waiting

    async def submit(self, prompt: str | list[int], params: SamplingParams) -> tuple[str, asyncio.Queue]:
        """Queue a request; returns (id, queue) once the engine accepted it. Raises KvspillError
        (the engine refused it), ServerBusyError or EngineUnavailableError."""
        if not self.ready:
            raise EngineUnavailableError(self.load_error or "the engine is loading or shutting down")
        if self._waiting >= self.max_waiting:
            raise ServerBusyError(f"{self._waiting} requests are already waiting; retry later")
        req_id = f"srv-{next(self._ids)}"
        aq: asyncio.Queue = asyncio.Queue()
        self._waiting += 1
        self._commands.put(("add", req_id, prompt, params, aq))
        try:
            first = await aq.get()
        except BaseException:
            self.abort(req_id)
            self._waiting -= 1
            raise
        if first is not ADDED:
            self._waiting -= 1
            raise first
        return req_id, aq

    def note_first_output(self) -> None:
        """The handler saw its request's first output (or end): it no longer waits."""
        self._waiting = max(0, self._waiting - 1)

    def abort(self, req_id: str) -> None:
        self._commands.put(("abort", req_id))

    async def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(engine)` on the loop thread between steps; returns its result."""
        if self.engine is None:
            raise EngineUnavailableError(self.load_error or "the engine is loading")
        fut: Future = Future()
        self._commands.put(("call", fn, fut))
        return await asyncio.wrap_future(fut)

    # ---- the loop thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.engine = self._factory()
        except Exception as e:  # noqa: BLE001 - reported on /health and every request
            logger.exception("loading the engine failed")
            self.load_error = f"the engine failed to load: {e}"
            self._ready.set()
            return
        self._ready.set()
        logger.info("engine ready (max_model_len=%d)", self.engine.max_model_len)
        while True:
            busy = self.engine.has_unfinished_requests()
            if not self._drain_commands(block=not busy):
                break
            if self.engine.has_unfinished_requests():
                self._step()
        self._abort_all("the server is shutting down")

    def _drain_commands(self, block: bool) -> bool:
        """Apply queued commands; False when asked to stop."""
        try:
            cmd = self._commands.get(timeout=0.5) if block else self._commands.get_nowait()
        except queue.Empty:
            return True
        while True:
            if cmd[0] == "stop":
                return False
            self._apply(cmd)
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "add":
            _, req_id, prompt, params, aq = cmd
            try:
                self.engine.add_request(prompt, params, req_id, admission=True)
            except Exception as e:  # noqa: BLE001 - handed to the request's handler
                self._push(aq, e)
                return
            self._tracked[req_id] = _Tracked(aq)
            self._push(aq, ADDED)
        elif kind == "abort":
            self._tracked.pop(cmd[1], None)
            self.engine.abort_request(cmd[1])
        elif kind == "call":
            _, fn, fut = cmd
            try:
                fut.set_result(fn(self.engine))
            except Exception as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:  # noqa: BLE001 - a failing step must not kill the loop
            logger.exception("engine step failed; ending the requests in flight")
            self._abort_all(f"the engine step failed: {type(e).__name__}: {e}")
            return
        now = time.monotonic()
        for out in outputs:
            tracked = self._tracked.get(out.req_id)
            if tracked is None:
                continue
            if tracked.first_output is None:
                tracked.first_output = now
            if self._on_output is not None:
                try:
                    self._on_output(out, RequestTimes(tracked.arrival, tracked.first_output))
                except Exception:  # noqa: BLE001 - metrics must not break serving
                    logger.exception("metrics callback failed")
            self._push(tracked.aqueue, out)
            if out.finished:
                self._tracked.pop(out.req_id, None)

    def _abort_all(self, message: str) -> None:
        for req_id, tracked in list(self._tracked.items()):
            try:
                self.engine.abort_request(req_id)
            except Exception:  # noqa: BLE001 - keep ending the others
                logger.exception("aborting %s failed", req_id)
            self._push(tracked.aqueue, StepFailedError(message))
        self._tracked.clear()

    def _push(self, aq: asyncio.Queue, item: object) -> None:
        assert self._aloop is not None
        try:
            self._aloop.call_soon_threadsafe(aq.put_nowait, item)
        except RuntimeError:  # the event loop is closed (shutdown)
            pass
