"""An asyncio front over ONE engine (`EngineClient`, e.g. `LLMEngine`) driven by its own thread.

Invariants:
- Only the loop thread touches the engine (add/abort/step/kv_stats). Handlers talk to it through
  a thread-safe command queue; results come back to each request's `asyncio.Queue` through
  `loop.call_soon_threadsafe`.
- One HTTP request may fan out into several engine requests (several prompts, `n` > 1) that share
  one queue; they are admitted together or not at all. The queue first receives `ADDED` or one
  exception (the group was refused), then `RequestOutput`s (tell them apart by `req_id`); each
  request's last one has `finished=True`, or an exception ends it.
- A failing `step()` never kills the loop. When the engine says which requests the failed step
  ran (`StepError.req_ids`), only those get a `StepFailedError` and are aborted; requests that
  were only waiting go on. Any other exception ends every request in flight.
- Admission is bounded on the event-loop thread (`admission.FrontDesk`), so a full queue is a
  503 + Retry-After at once, not after the current step: a request waits from admission to its
  first output; a new group is refused (`ServerBusyError`) when, counted with what already
  waits, it would pass `max_waiting` requests or `max_queued_tokens` prompt tokens. A group is
  always admitted when nothing waits, so one large request is never refused forever.
- A group the KV tiers have no room for now (`KVCacheBusyError`: what running requests may grow
  to leaves too little) waits on the loop thread, first come first served, and joins the engine
  once finished requests free the room, as vLLM's waiting queue does; it still counts as waiting
  for the front desk's bounds. (A 503 there sent 66 of 96 clients of `kvspill bench serve` at 32 x 2K
  away while the running 30 held 65K of the pool's 66.6K tokens: H100, 2026-12-05,
  bench/results/2026-12-05-h100-merge-defaults.) A group that could never fit is still refused (400).
- `abort_all` (shutdown) ends every open request's queue at once from the event loop, even
  while a long step runs; the engine aborts them when the step returns.
- Every way a request ends calls `on_end(req_id, how)` on the engine thread, `how` one of
  "finished" (its last output went out), "abort" (the client left, or shutdown) or "error" (a
  failed step), so per-request state outside the engine (metrics) is freed and counted.
- `kv_stats()` answers within KV_FRESH_WAIT_S whatever the loop is doing: fresh when the loop is
  between steps, else the snapshot the loop thread publishes at most every KV_SNAPSHOT_INTERVAL_S
  (at most that interval plus one step old; it says its age in `snapshot_age_s`). A long prefill
  step would otherwise hold /v1/kv and /metrics (and the monitor) for its whole length.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TypeVar, cast

from kvspill.engine.client import EngineClient, KVCacheControl
from kvspill.errors import KVCacheBusyError, KvspillError, OutOfKVMemoryError, StepError
from kvspill.sampling_params import SamplingParams
from kvspill.server.admission import FrontDesk, check_fits_context, prompt_size
from kvspill.server.admission import ServerBusyError as ServerBusyError  # re-exported: its home before
from kvspill.stats import KVStats
from kvspill.types import RequestOutput

logger = logging.getLogger(__name__)
T = TypeVar("T")

ADDED = object()  # the sentinel put first on a request's queue once the engine accepted it
QUEUED_TOKENS_PER_MODEL_LEN = 8  # default max_queued_tokens: at least this many full contexts
KV_SNAPSHOT_INTERVAL_S = 0.25  # how often the loop thread republishes kv_stats() (a few hundred us each)
KV_FRESH_WAIT_S = 0.1
STEP_TARGET_S = 0.5  # steps are sized to about this long, so an abort waits at most about this  # how long /v1/kv waits for fresh stats before it answers with the snapshot


class EngineUnavailableError(Exception):
    """The engine is still loading, failed to load, or is shutting down."""


class StepFailedError(Exception):
    """A step raised while this request was in flight; the request was ended."""


@dataclass
class _Tracked:
    aqueue: asyncio.Queue
    arrival: float  # monotonic seconds when `submit_many` queued it
    first_output: float | None = None


@dataclass
class _HeldGroup:
    """A group accepted by the front desk that waits for KV room (loop thread)."""

    group: list[tuple[str, tuple[str | list[int], SamplingParams]]]
    aqueue: asyncio.Queue
    arrival: float
    token_ids: list[list[int]] | None = None  # the prompts' ids, once tokenized

    @property
    def req_ids(self) -> set[str]:
        return {req_id for req_id, _ in self.group}


@dataclass
class RequestTimes:
    """Times (monotonic seconds) of one request, for metrics."""

    arrival: float
    first_output: float | None = None


def default_queued_tokens(engine: EngineClient) -> int:
    """Prompt tokens that may wait by default: what the KV tiers hold (a batch's worth of work
    waits without a 503), at least QUEUED_TOKENS_PER_MODEL_LEN full contexts. With 8 contexts
    alone, 32 clients of 2K-token prompts on a 4K context got 80 of 96 requests refused while the
    pool had room for 75K tokens (H200, 2026-12-02; bench/results/2026-12-02-h200-concurrency)."""
    floor = QUEUED_TOKENS_PER_MODEL_LEN * engine.max_model_len
    try:
        stats = engine.kv_stats()
    except Exception:  # noqa: BLE001 - an engine without tier stats keeps the floor
        return floor
    held = sum(tier.blocks for _, tier in stats.tiers.items()) * stats.block_size
    return max(floor, held)


class AsyncEngine:
    """Owns the engine thread. `start()` builds the engine there (via `factory`) and loops.

    `max_queued_tokens=None` means QUEUED_TOKENS_PER_MODEL_LEN x the engine's max_model_len."""

    def __init__(
        self,
        factory: Callable[[], EngineClient],
        max_waiting: int = 64,
        on_output: Callable[[RequestOutput, RequestTimes], None] | None = None,
        max_queued_tokens: int | None = None,
        on_end: Callable[[str, str], None] | None = None,
    ) -> None:
        self._factory = factory
        self.max_waiting = max_waiting
        self.max_queued_tokens = max_queued_tokens
        self._on_output = on_output
        self._on_end = on_end
        self._desk = FrontDesk(max_waiting)  # event-loop thread only
        self.engine: EngineClient | None = None  # set on the loop thread once `factory()` returns
        self.load_error: str | None = None
        self._commands: queue.Queue = queue.Queue()
        self._tracked: dict[str, _Tracked] = {}  # loop thread only
        self._held: collections.deque[_HeldGroup] = collections.deque()  # loop thread only
        self._ids = itertools.count()
        self._stopping = False
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        # (monotonic time, kv_stats()) replaced whole by the loop thread: readers need no lock.
        self._kv_snapshot: tuple[float, KVStats] | None = None

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

    def abort_all(self, message: str) -> None:
        """End every request in flight with `EngineUnavailableError(message)` (shutdown timeout):
        their handlers hear it now (event-loop thread), the engine aborts them between steps."""
        self._desk.fail_all(EngineUnavailableError(message))
        self._commands.put(("abort_all", message))

    @property
    def num_open_requests(self) -> int:
        """Requests admitted and not ended yet (event-loop thread)."""
        return self._desk.num_open

    def shutdown(self, timeout: float = 5.0) -> None:
        """Abort whatever is still in flight and stop the thread."""
        self._stopping = True
        self._commands.put(("stop",))
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- the front (event-loop thread) ---------------------------------------------------------

    async def submit(self, prompt: str | list[int], params: SamplingParams) -> tuple[str, asyncio.Queue]:
        """`submit_many` of one request."""
        ids, aq = await self.submit_many([(prompt, params)])
        return ids[0], aq

    async def submit_many(
        self, items: Sequence[tuple[str | list[int], SamplingParams]]
    ) -> tuple[list[str], asyncio.Queue]:
        """Queue a group of requests (all or none); returns (ids, their shared queue) once the engine
        accepted them. Raises KvspillError (the engine refused one, or a prompt cannot fit the
        context), ServerBusyError or EngineUnavailableError."""
        if not self.ready:
            raise EngineUnavailableError(self.load_error or "the engine is loading or shutting down")
        assert self.engine is not None  # ready
        for prompt, params in items:  # a 400 that no retry passes, before the queue may say 503
            if isinstance(prompt, list) and params.truncate_prompt_tokens is not None:
                prompt = self.engine.prompt_ids(prompt, params)
            shifts = self.engine.context_shift if params.context_shift is None else params.context_shift
            check_fits_context(prompt, None if shifts else params.max_tokens, self.engine.max_model_len)
        req_ids = [f"srv-{next(self._ids)}" for _ in items]
        aq: asyncio.Queue = asyncio.Queue()
        self._desk.admit(req_ids, [prompt_size(prompt) for prompt, _ in items], aq)  # or ServerBusyError
        # Arrival is now, not when the engine thread takes the command after the step in flight:
        # TTFT and e2e count that wait, as a client (and vLLM's metrics) see it.
        self._commands.put(("add", list(zip(req_ids, items, strict=True)), aq, time.monotonic()))
        try:
            first = await aq.get()
        except BaseException:
            self.abort(*req_ids)
            raise
        if first is not ADDED:
            self._desk.ended(req_ids)
            raise first
        return req_ids, aq

    def abort(self, *req_ids: str) -> None:
        """End these requests (event-loop thread)."""
        self._desk.ended(req_ids)
        self._commands.put(("abort", req_ids))

    async def call(self, fn: Callable[[EngineClient], T]) -> T:
        """Run `fn(engine)` on the loop thread between steps; returns its result."""
        if self.engine is None:
            raise EngineUnavailableError(self.load_error or "the engine is loading")
        fut: Future[T] = Future()
        self._commands.put(("call", fn, fut))
        return await asyncio.wrap_future(fut)

    async def kv_control(self, fn: Callable[[KVCacheControl], T]) -> T:
        """A cache operation (`/v1/kv/*`) on the loop thread between steps, as `call`.
        NotImplementedError for an engine without `KVCacheControl`."""
        engine = self.engine
        if engine is not None and not isinstance(engine, KVCacheControl):
            raise NotImplementedError("this engine does not manage its KV cache by prefix")
        return await self.call(lambda e: fn(cast(KVCacheControl, e)))  # checked above

    async def kv_stats(self, wait_s: float = KV_FRESH_WAIT_S) -> KVStats:
        """`engine.kv_stats()` now when the loop answers within `wait_s` (it is between steps),
        else the latest snapshot (a long step is running). Raises EngineUnavailableError."""
        try:
            return await asyncio.wait_for(self.call(lambda _: self._kv_stats()), wait_s)
        except TimeoutError:
            snapshot = self.kv_snapshot()
            if snapshot is None:
                raise EngineUnavailableError("the engine is busy and has published no KV stats yet") from None
            return snapshot

    def kv_snapshot(self) -> KVStats | None:
        """The latest published `kv_stats()` with its age in `snapshot_age_s`; None before the first."""
        snapshot = self._kv_snapshot
        if snapshot is None:
            return None
        published, stats = snapshot
        return replace(stats, snapshot_age_s=round(time.monotonic() - published, 3))

    # ---- the loop thread -----------------------------------------------------------------------

    @property
    def _engine(self) -> EngineClient:
        """The engine, for the loop thread (which built it before it runs anything else)."""
        assert self.engine is not None, "the engine is used before the loop thread built it"
        return self.engine

    def _kv_stats(self) -> KVStats:
        """The engine's `kv_stats()`, its waiting count with the requests held for KV room."""
        stats = self._engine.kv_stats()
        held = sum(len(h.group) for h in self._held)
        if not held or stats.scheduler is None:
            return stats
        return replace(
            stats, scheduler=replace(stats.scheduler, num_waiting=stats.scheduler.num_waiting + held)
        )

    def _publish_kv(self) -> None:
        now = time.monotonic()
        if self._kv_snapshot is not None and now - self._kv_snapshot[0] < KV_SNAPSHOT_INTERVAL_S:
            return
        try:
            self._kv_snapshot = (now, self._kv_stats())
        except Exception:  # noqa: BLE001 - stats must not break serving
            logger.exception("kv_stats failed")

    def _run(self) -> None:
        try:
            engine = self.engine = self._factory()
        except KvspillError as e:  # the user's to fix: the message says how, no traceback
            logger.error("loading the engine failed: %s", e, exc_info=logger.isEnabledFor(logging.DEBUG))
            self.load_error = f"the engine failed to load: {e}"
            self._ready.set()
            return
        except Exception as e:  # noqa: BLE001 - reported on /health and every request
            logger.exception("loading the engine failed")
            self.load_error = f"the engine failed to load: {e}"
            self._ready.set()
            return
        limit_step_time = getattr(engine, "limit_step_time", None)
        if limit_step_time is not None:  # LLMEngine: aborts take effect within about a step
            limit_step_time(STEP_TARGET_S)
        if self.max_queued_tokens is None:
            self.max_queued_tokens = default_queued_tokens(engine)
        self._desk.max_queued_tokens = self.max_queued_tokens
        self._publish_kv()  # before ready: a /v1/kv poll that finds the loop busy has a snapshot, not a 503
        self._ready.set()
        logger.info(
            "engine ready (max_model_len=%d, max_queued_tokens=%d)",
            engine.max_model_len,
            self.max_queued_tokens,
        )
        while True:
            busy = engine.has_unfinished_requests()
            if not self._drain_commands(block=not busy):
                break
            self._admit_held()
            if engine.has_unfinished_requests():
                self._step()
            self._publish_kv()
        self._abort_all(StepFailedError("the server is shutting down"), "abort")
        close = getattr(engine, "close", None)
        if close is not None:  # LLMEngine: finish writing --kv-persist-dir (a crash mid-write is safe)
            close()

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
            self._add_group(cmd[1], cmd[2], cmd[3])
        elif kind == "abort":
            gone = set(cmd[1])
            self._held = collections.deque(h for h in self._held if not (h.req_ids & gone))
            for req_id in cmd[1]:
                if self._tracked.pop(req_id, None) is not None:
                    self._ended(req_id, "abort")
                self._engine.abort_request(req_id)
        elif kind == "abort_all":
            self._abort_all(EngineUnavailableError(cmd[1]), "abort")
        elif kind == "call":
            _, fn, fut = cmd
            if not fut.set_running_or_notify_cancel():
                return  # the caller stopped waiting (kv_stats' timeout)
            try:
                result = fn(self._engine)
            except Exception as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)
                return
            fut.set_result(result)

    def _add_group(
        self,
        group: list[tuple[str, tuple[str | list[int], SamplingParams]]],
        aq: asyncio.Queue,
        arrival: float,
    ) -> None:
        """Hand the group to the engine, or hold it (behind any held before it) until KV room frees."""
        self._held.append(_HeldGroup(group, aq, arrival))
        self._admit_held()

    def _admit_held(self) -> None:
        """Add held groups in arrival order while the engine takes them (it says `KVCacheBusyError`
        while what running requests may grow to leaves too little room)."""
        while self._held and self._try_add(self._held[0]):
            self._held.popleft()

    def _try_add(self, held: _HeldGroup) -> bool:
        """Add the group to the engine: True once it is added or refused for good (its handler has
        the error), False when there is no KV room for it yet (nothing of it stays added)."""
        added: list[str] = []
        try:
            if held.token_ids is None:
                held.token_ids = [
                    self._engine.prompt_ids(prompt, params) for _, (prompt, params) in held.group
                ]
            ids = held.token_ids
            if len(held.group) > 1:
                self._check_group_fits(ids, [params for _, (_, params) in held.group])
            for (req_id, (_, params)), token_ids in zip(held.group, ids, strict=True):
                self._engine.add_request(token_ids, params, req_id, admission=True)
                added.append(req_id)
        except Exception as e:  # noqa: BLE001 - handed to the request's handler
            for req_id in added:
                self._engine.abort_request(req_id)
            if isinstance(e, KVCacheBusyError):
                return False
            self._push(held.aqueue, e)
            return True
        for req_id, _ in held.group:
            self._tracked[req_id] = _Tracked(held.aqueue, held.arrival)
        self._push(held.aqueue, ADDED)
        return True

    def _check_group_fits(self, ids: list[list[int]], params: list[SamplingParams]) -> None:
        """A group whose KV together exceeds the tiers could never run: a client error (400), not a
        503 that would be retried forever. (Each request alone is checked by `add_request`.)"""
        need = sum(self._engine.kv_tokens_needed(len(x), p) for x, p in zip(ids, params, strict=True))
        capacity = self._engine.kv_capacity_tokens()
        if need > capacity:
            raise OutOfKVMemoryError(
                f"these {len(ids)} completions (prompts x n) need KV for {need} tokens together, but the KV "
                f"tiers hold {capacity} tokens in all: send fewer prompts, a smaller n or a lower max_tokens"
            )

    def _step(self) -> None:
        try:
            outputs = self._engine.step()
        except StepError as e:
            logger.exception("engine step failed; ending the %d requests it ran", len(e.req_ids))
            self._fail(e.req_ids, StepFailedError(f"the engine step failed: {e}"), "error")
            return
        except Exception as e:  # noqa: BLE001 - a failing step must not kill the loop
            logger.exception("engine step failed; ending the requests in flight")
            self._abort_all(StepFailedError(f"the engine step failed: {type(e).__name__}: {e}"), "error")
            return
        now = time.monotonic()
        for out in outputs:
            tracked = self._tracked.get(out.req_id)
            if tracked is None:
                continue
            if tracked.first_output is None:
                tracked.first_output = now
                self._call_front(self._desk.started, out.req_id)
            if self._on_output is not None:
                try:
                    self._on_output(out, RequestTimes(tracked.arrival, tracked.first_output))
                except Exception:  # noqa: BLE001 - metrics must not break serving
                    logger.exception("metrics callback failed")
            self._push(tracked.aqueue, out)
            if out.finished:
                self._tracked.pop(out.req_id, None)
                self._ended(out.req_id, "finished")

    def _abort_all(self, error: Exception, how: str) -> None:
        for held in self._held:
            self._push(held.aqueue, error)
        self._held.clear()
        self._fail(list(self._tracked), error, how)

    def _fail(self, req_ids: Sequence[str], error: Exception, how: str) -> None:
        """Abort these requests in the engine and hand their handlers `error` (`how`: on_end's)."""
        for req_id in req_ids:
            tracked = self._tracked.pop(req_id, None)
            try:
                self._engine.abort_request(req_id)
            except Exception:  # noqa: BLE001 - keep ending the others
                logger.exception("aborting %s failed", req_id)
            if tracked is not None:
                self._push(tracked.aqueue, error)
                self._ended(req_id, how)

    def _ended(self, req_id: str, how: str) -> None:
        """A request left the engine (engine thread): free what is kept for it outside."""
        self._call_front(self._desk.ended, (req_id,))
        if self._on_end is not None:
            try:
                self._on_end(req_id, how)
            except Exception:  # noqa: BLE001 - metrics must not break serving
                logger.exception("on_end callback failed")

    def _call_front(self, fn: Callable, *args: object) -> None:
        assert self._aloop is not None
        try:
            self._aloop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the event loop is closed (shutdown)
            pass

    def _push(self, aq: asyncio.Queue, item: object) -> None:
        assert self._aloop is not None
        try:
            self._aloop.call_soon_threadsafe(aq.put_nowait, item)
        except RuntimeError:  # the event loop is closed (shutdown)
            pass
