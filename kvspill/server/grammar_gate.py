"""A guided request's grammar, compiled before admission: off the event loop and off the engine
thread, under a deadline, within the client's compile budget.

Why: the engine compiled at `add_request`, on the engine thread, so one schema of 3,000 optional
properties stopped every other stream for 141 s. The order here, cheapest refusal first:
1. static checks (`guided/limits.py`): size limits, and a schema's keywords and satisfiability;
   a 400 naming the limit or the place, nothing compiled;
2. the compiled-grammar cache (keyed by the grammar's canonical form): a hit is free;
3. a recent failure of the same grammar (FAILURE_TTL_S): the same 400 again, nothing compiled;
4. the client's compile budget (`compile_budget.py`): a 429 with Retry-After;
5. a trial compile in a worker process (`guided/compile_pool.py`): a 400 past
   `--guided-compile-timeout` (the worker is killed and replaced); abandoned, and its worker
   killed, when the client disconnects (499);
6. the compile itself, on the gate's one thread (xgrammar releases the GIL): about the trial's
   time, so under the deadline too.
The spec then carries its compiled grammar (`GuidedSpec.compiled`) to the engine, whose
`add_request` and runner use it as it is: no cache eviction in between can make them compile.

Invariants:
- The engine thread never compiles a server request's grammar.
- `prepare` runs on the event-loop thread; compiling happens in the workers and the gate thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

from kvspill.engine.client import EngineClient, GrammarCompilerClient
from kvspill.errors import InvalidParameterError
from kvspill.guided.compile_pool import DEFAULT_TIMEOUT_S, CompilePool, CompilePoolBusyError, WorkerTime
from kvspill.guided.limits import DEFAULT_LIMITS, GuidedLimits, check_static
from kvspill.guided.spec import GuidedSpec
from kvspill.sampling_params import SamplingParams
from kvspill.server.admission import ServerBusyError
from kvspill.server.compile_budget import DEFAULT_BUDGET_S, CompileBudget, CompileBudgetError
from kvspill.server.errors import error_response

T = TypeVar("T")
POLL_S = 0.25  # how often a waiting compile checks whether its client is still there
FAILURE_TTL_S = 600.0
MAX_FAILURES = 1024


class ClientGoneError(Exception):
    """The client disconnected while its grammar compiled; the compile was abandoned."""


@dataclass(frozen=True)
class GateSettings:
    timeout_s: float = DEFAULT_TIMEOUT_S  # --guided-compile-timeout
    budget_s: float = DEFAULT_BUDGET_S  # --guided-compile-budget (per client per minute; 0: none)
    limits: GuidedLimits = DEFAULT_LIMITS
    num_workers: int | None = None  # None: compile_pool.default_num_workers()


def client_key(request: Request) -> str:
    """Whose compile budget a request spends: its IP address (compile_budget.py says why)."""
    return request.client.host if request.client is not None else "unknown"


def budget_response(e: CompileBudgetError) -> JSONResponse:
    return error_response(
        429, str(e), "rate_limit_error", "rate_limit_exceeded", headers={"Retry-After": str(e.retry_after_s)}
    )


class GrammarGate:
    def __init__(self, settings: GateSettings | None = None) -> None:
        self.settings = settings or GateSettings()
        self.budget = CompileBudget(self.settings.budget_s)
        self._pool: CompilePool | None = None  # made at the first uncached compile
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kvspill-grammar")
        self._failures: OrderedDict[str, tuple[float, str, str]] = (
            OrderedDict()
        )  # digest -> (when, param, msg)

    async def prepare(self, engine: EngineClient, params: SamplingParams, request: Request) -> SamplingParams:
        """`params` with its guided spec carrying the compiled grammar (itself when unguided).
        Raises InvalidParameterError, CompileBudgetError, ServerBusyError or ClientGoneError."""
        spec = params.guided
        if spec is None or spec.compiled is not None:
            return params
        check_static(spec, self.settings.limits)
        compiler = engine.guided_compiler
        if compiler is None:
            raise InvalidParameterError(spec.param, "guided decoding needs a model with a tokenizer")
        hit = compiler.cached(spec)
        if hit is None:
            hit = await self._compile(compiler, spec, client_key(request), request)
        return replace(params, guided=spec.with_compiled(hit))

    async def _compile(
        self, compiler: GrammarCompilerClient, spec: GuidedSpec, client: str, request: Request
    ) -> object:
        key = f"{spec.kind}\0{spec.param}\0{spec.value}".encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(key).hexdigest()
        self._raise_recent_failure(digest)
        self.budget.start(client)
        used = WorkerTime()
        compile_s = 0.0
        try:
            pool = self._pool_for(compiler)
            await _unless_gone(lambda: pool.trial(spec, used), request)
            started = time.monotonic()
            compiled = await asyncio.get_running_loop().run_in_executor(self._thread, compiler.compile, spec)
            compile_s = time.monotonic() - started
            return compiled
        except InvalidParameterError as e:
            self._remember_failure(digest, e)
            raise
        except CompilePoolBusyError as e:
            raise ServerBusyError(str(e)) from e
        finally:  # the worker's time (a cancelled trial's too) and this process's compile
            self.budget.finish(client, used.seconds + compile_s)

    def _pool_for(self, compiler: GrammarCompilerClient) -> CompilePool:
        if self._pool is None:
            self._pool = CompilePool(
                compiler.tokenizer_info_json, self.settings.num_workers, self.settings.timeout_s
            )
        return self._pool

    def _raise_recent_failure(self, digest: str) -> None:
        failure = self._failures.get(digest)
        if failure is None:
            return
        when, param, message = failure
        if time.monotonic() - when > FAILURE_TTL_S:
            del self._failures[digest]
            return
        raise InvalidParameterError(param, message)

    def _remember_failure(self, digest: str, e: InvalidParameterError) -> None:
        self._failures[digest] = (time.monotonic(), e.param, str(e))
        self._failures.move_to_end(digest)
        while len(self._failures) > MAX_FAILURES:
            self._failures.popitem(last=False)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self._thread.shutdown(wait=False, cancel_futures=True)


async def _unless_gone(work: Callable[[], Awaitable[T]], request: Request) -> T:
    """`await work()`, cancelled (ClientGoneError) as soon as the client has disconnected."""
    task = asyncio.ensure_future(work())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGoneError("the client disconnected while its grammar compiled")
    finally:
        if not task.done():
            task.cancel()  # the pool kills the worker that was compiling it
