"""Trial compiles in worker processes, each under a deadline: the server's proof that a grammar
compiles, and in how long, before anything in its own process compiles it.

Why processes: xgrammar's compile runs in C++ to its end and a thread cannot be stopped; a
process can be killed. Why a trial and not the grammar itself: a compiled grammar crosses a
process boundary only serialized, and serializing took 15x the compile (800 optional
properties: 1.2 s to compile, 17 s to serialize, 4.5 s to read back; 2-core CPU). So the worker
compiles and answers ok or the error; the server then compiles the same spec on a thread of its
own (xgrammar releases the GIL while compiling), which takes about the trial's time, known to be
under the deadline.

Invariants:
- Workers are spawned (never forked: the server holds threads and a CUDA context), each with the
  tokenizer's xgrammar info (sent serialized at start), and start at the first trial, not at
  server start: a server that never guides never pays for them (each imports torch, through
  xgrammar: a few seconds and a few hundred MB).
- A trial that passes `timeout_s` (`--guided-compile-timeout`) kills its worker and is an
  `InvalidParameterError` naming the limit; a cancelled trial (the client went away) kills its
  worker too; a worker that dies on a spec (a crash in C++) is a 400 for that spec. Each killed
  worker is replaced at once, in the background.
- At most `max_queued` trials wait for a worker; one more is a `CompilePoolBusyError` (503).
- Torch-free at import: the server imports this module; xgrammar loads in the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from kvspill.errors import InvalidParameterError
from kvspill.guided.grammar_compile import compile_spec, load_xgrammar
from kvspill.guided.spec import GuidedSpec

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
START_TIMEOUT_S = 120.0  # a worker imports xgrammar and torch: seconds, longer on a loaded host
MAX_QUEUED = 16


def default_num_workers() -> int:
    """One worker per 4 cores, 1 to 2: compiles are rare next to steps, and each worker holds a
    core while it compiles (2 cores: 1 worker)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(2, cores // 4))


class CompilePoolBusyError(Exception):
    """Too many trials wait for a worker, or no worker could start; retry later (HTTP 503)."""


def _worker_main(conn: Connection, tokenizer_info_json: str) -> None:
    """A worker: read the tokenizer, say ready, then answer (kind, value, param) jobs until the
    server closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the server, which stops us
    xgr = load_xgrammar()
    info = xgr.TokenizerInfo.deserialize_json(tokenizer_info_json)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    # First use pays one-off costs (torch's first tensor, xgrammar's first matcher): not in a
    # request's deadline. A vocabulary that cannot start a JSON object (a test model's) is no
    # reason to stop: the requests that need one get that answer.
    with contextlib.suppress(InvalidParameterError):
        compile_spec(compiler, GuidedSpec("json_object"), info.vocab_size)
    conn.send(("ready", ""))
    while True:
        try:
            kind, value, param = conn.recv()
        except EOFError:
            return
        try:
            compile_spec(compiler, GuidedSpec(kind, value, param), info.vocab_size)
            conn.send(("ok", ""))
        except InvalidParameterError as e:
            conn.send(("error", str(e)))
        except Exception as e:  # noqa: BLE001 - anything the compile raises is this spec's error
            conn.send(("error", f"{param}: cannot compile this {kind}: {type(e).__name__}: {e}"))


@dataclass
class WorkerTime:
    """How long a trial held a worker (waiting for one and starting one not counted): what a
    client's compile budget is charged, a cancelled trial's too."""

    started: float | None = None
    ended: float | None = None

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else time.monotonic()) - self.started


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection


async def _readable(conn: Connection) -> None:
    """Until `conn` has a message or its other end is gone (EOF), without a thread."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = conn.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


class CompilePool:
    """Worker processes for trial compiles (event-loop thread only)."""

    def __init__(
        self,
        tokenizer_info_json: Callable[[], str],
        num_workers: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        """`tokenizer_info_json` is called once, on a thread, at the first trial."""
        self._tokenizer_info_json = tokenizer_info_json
        self.num_workers = num_workers or default_num_workers()
        self.timeout_s = timeout_s
        self.max_queued = max_queued
        self._info_json: str | None = None
        self._booting: asyncio.Task[None] | None = None
        self._idle: asyncio.Queue[_Worker | None] = asyncio.Queue()  # None: a worker failed to start
        self._workers: set[_Worker] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._num_waiting = 0
        self.num_replaced = 0  # workers killed (deadline, cancel, crash) and started again

    async def trial(self, spec: GuidedSpec, used: WorkerTime | None = None) -> float:
        """Compile `spec` in a worker; returns the seconds it took (also noted in `used`, however
        the trial ends). InvalidParameterError when it does not compile or passes the deadline,
        CompilePoolBusyError when too many wait."""
        if self._num_waiting >= self.max_queued:
            raise CompilePoolBusyError(
                f"{self._num_waiting} grammar compiles are already waiting (at most {self.max_queued}); retry later"
            )
        self._num_waiting += 1
        try:
            await self._boot()
            worker = await self._take_worker()
        finally:
            self._num_waiting -= 1
        return await self._run(worker, spec, used or WorkerTime())

    async def _take_worker(self) -> _Worker:
        """The next idle worker; one found dead while idle (killed from outside) is replaced."""
        while True:
            worker = await self._idle.get()
            if worker is None:
                self._spawn()  # try again for the next trial
                raise CompilePoolBusyError(
                    "the grammar compile worker could not start (see the server log); retry later"
                )
            if worker.process.is_alive():
                return worker
            self._kill(worker)
            self._spawn()

    async def _run(self, worker: _Worker, spec: GuidedSpec, used: WorkerTime) -> float:
        used.started = time.monotonic()
        keep = False
        try:
            worker.conn.send((spec.kind, spec.value, spec.param))
            await asyncio.wait_for(_readable(worker.conn), self.timeout_s)
            status, message = worker.conn.recv()
            keep = True
        except TimeoutError:
            raise InvalidParameterError(
                spec.param,
                f"{spec.param}: compiling this {spec.kind} took longer than {self.timeout_s:g} s "
                f"(limit --guided-compile-timeout={self.timeout_s:g}); simplify it (fewer optional "
                "properties, alternatives or repetitions)",
            ) from None
        except (EOFError, OSError) as e:
            raise InvalidParameterError(
                spec.param,
                f"{spec.param}: the grammar compiler stopped on this {spec.kind} ({e or 'it crashed'})",
            ) from None
        finally:
            used.ended = time.monotonic()
            if keep:
                self._idle.put_nowait(worker)
            else:  # past the deadline, cancelled (the client went away) or dead: a fresh one
                self._kill(worker)
                self.num_replaced += 1
                self._spawn()
        if status != "ok":
            raise InvalidParameterError(spec.param, message)
        return used.seconds

    async def _boot(self) -> None:
        """Read the tokenizer once (on a thread) and start the workers."""
        if self._booting is None:
            self._booting = asyncio.ensure_future(self._read_tokenizer())
        try:
            await asyncio.shield(self._booting)
        except Exception:
            self._booting = None  # the next trial tries again
            raise

    async def _read_tokenizer(self) -> None:
        self._info_json = await asyncio.to_thread(self._tokenizer_info_json)
        for _ in range(self.num_workers):
            self._spawn()

    def _spawn(self) -> None:
        task = asyncio.ensure_future(self._start_worker())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_worker(self) -> None:
        """Start one worker and queue it once it is ready (None instead when it cannot start)."""
        assert self._info_json is not None
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_worker_main, args=(child, self._info_json), name="kvspill-grammar", daemon=True
        )
        worker = _Worker(process, parent)
        try:
            try:
                await asyncio.to_thread(process.start)  # spawn writes the tokenizer (MBs) to the child
            finally:
                # Now, not after the wait: while this process holds the child's end too, a worker
                # that dies starting gives no EOF and the wait ran to START_TIMEOUT_S (found by the
                # fuzz run on a tiny model, whose first compile killed the worker).
                child.close()
            self._workers.add(worker)
            await asyncio.wait_for(_readable(parent), START_TIMEOUT_S)
            parent.recv()
        except Exception as e:  # noqa: BLE001 - any failure to start: logged, and the trial told
            logger.error("a grammar compile worker failed to start (exit code %s): %r", process.exitcode, e)
            self._kill(worker)
            self._idle.put_nowait(None)
            return
        self._idle.put_nowait(worker)

    def _kill(self, worker: _Worker) -> None:
        self._workers.discard(worker)
        with contextlib.suppress(OSError):
            worker.conn.close()
        if worker.process.pid is None:
            return  # never started
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(1)  # reaped: a killed process exits at once

    def close(self) -> None:
        """Kill every worker and stop starting new ones (server shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        for worker in list(self._workers):
            self._kill(worker)

    @property
    def num_alive(self) -> int:
        return sum(1 for w in self._workers if w.process.is_alive())
