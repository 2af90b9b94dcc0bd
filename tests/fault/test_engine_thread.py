"""The engine thread cannot be made to stall or leak by clients: a full queue is refused at once
and shutdown ends streams while a long step runs; a failing step fails only the requests it ran;
1,000 aborted requests leave no per-request entries behind; steps are sized by measured time so
an abort waits for a short chunk, not a whole prefill. (AsyncEngine over a fake engine whose
steps take as long as a test needs; the step budget over the tiny Llama.)"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from kvspill.config import EngineConfig
from kvspill.engine.step_budget import StepBudget
from kvspill.errors import StepError
from kvspill.sampling_params import SamplingParams
from kvspill.server.async_engine import AsyncEngine, EngineUnavailableError, ServerBusyError, StepFailedError
from kvspill.server.metrics import ServerMetrics
from kvspill.stats import KVStats
from kvspill.types import RequestOutput


class StepEngine:
    """An `EngineClient`: a step gives one token to each live request not in `held`, after
    `step_s`; `fail_with` (request ids) makes the next step raise StepError for those."""

    max_model_len = 2048  # room for max_tokens=1000 (the front refuses what cannot fit)
    context_shift = False
    vocab_size = 100
    tokenizer = None
    guided_compiler = None

    def __init__(self, step_s: float = 0.0) -> None:
        self.step_s = step_s
        self.live: dict[str, int] = {}
        self.held: set[str] = set()
        self.fail_with: list[str] | None = None
        self.in_step = threading.Event()

    def kv_tokens_needed(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        return num_prompt_tokens + (params.max_tokens or 0)

    def kv_capacity_tokens(self) -> int:
        return 10**9

    def encode(self, prompt: str) -> list[int]:
        return [1] * len(prompt.split())

    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        return self.encode(prompt) if isinstance(prompt, str) else list(prompt)

    def add_request(self, prompt, params=None, req_id=None, admission=False) -> str:  # type: ignore[no-untyped-def]
        self.live[req_id] = params.max_tokens
        return req_id

    def abort_request(self, req_id: str) -> None:
        self.live.pop(req_id, None)
        self.held.discard(req_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.live)

    def kv_stats(self) -> KVStats:
        return KVStats()

    def step(self) -> list[RequestOutput]:
        self.in_step.set()
        time.sleep(self.step_s)
        self.in_step.clear()
        if self.fail_with is not None:
            failed, self.fail_with = self.fail_with, None
            raise StepError(failed, RuntimeError("CUDA error: an illegal memory access"))
        outs = []
        for req_id in [r for r in self.live if r not in self.held]:
            self.live[req_id] -= 1
            done = self.live[req_id] == 0
            outs.append(RequestOutput(req_id, None, [1], delta_token_ids=[5], finished=done))
            if done:
                del self.live[req_id]
        return outs


async def _started(engine: StepEngine, **kw) -> AsyncEngine:  # type: ignore[no-untyped-def]
    ae = AsyncEngine(lambda: engine, **kw)
    ae.start(asyncio.get_running_loop())
    assert await asyncio.to_thread(ae.wait_ready, 5)
    return ae


async def _next(aq: asyncio.Queue, timeout: float = 30) -> object:
    # A bound on a hang, not a speed check: on a loaded 2-core CI host 5 s ran out once (2026-12-03).
    return await asyncio.wait_for(aq.get(), timeout)


def test_a_full_queue_is_refused_at_once_during_a_long_step() -> None:
    engine = StepEngine(step_s=2.0)

    async def main() -> None:
        ae = await _started(engine, max_waiting=2)
        engine.held.update({"srv-0", "srv-1"})  # no first output: both keep waiting
        await ae.submit([1], SamplingParams(max_tokens=3))
        await ae.submit([1], SamplingParams(max_tokens=3))
        assert await asyncio.to_thread(engine.in_step.wait, 5)  # a 2 s step runs now
        start = time.monotonic()
        with pytest.raises(ServerBusyError, match="2 requests are already waiting"):
            await ae.submit([1], SamplingParams(max_tokens=3))
        assert time.monotonic() - start < 0.2  # decided on the event loop, not after the step
        await asyncio.to_thread(ae.shutdown, 0.1)

    asyncio.run(main())


def test_shutdown_ends_streams_during_a_long_step() -> None:
    engine = StepEngine(step_s=3.0)

    async def main() -> None:
        ae = await _started(engine)
        _, aq = await ae.submit([1], SamplingParams(max_tokens=5))
        assert await asyncio.to_thread(engine.in_step.wait, 5)
        start = time.monotonic()
        ae.abort_all("the server is shutting down")
        item = await _next(aq, timeout=1)
        assert isinstance(item, EngineUnavailableError) and time.monotonic() - start < 0.2
        assert ae.num_open_requests == 0
        await asyncio.to_thread(ae.shutdown, 0.1)

    asyncio.run(main())


def test_a_failing_step_fails_only_the_requests_it_ran() -> None:
    engine = StepEngine()

    async def main() -> None:
        ae = await _started(engine)
        engine.held.add("srv-0")  # srv-0 waits (not in the step); srv-1 runs and breaks it
        (waiting, wq), (running, rq) = (
            await ae.submit([1], SamplingParams(max_tokens=3)),
            await ae.submit([2], SamplingParams(max_tokens=3)),
        )
        assert (waiting, running) == ("srv-0", "srv-1")
        engine.fail_with = [running]
        while not isinstance(item := await _next(rq), BaseException):
            pass
        assert isinstance(item, StepFailedError) and "illegal memory access" in str(item)
        engine.held.clear()  # the waiting request goes on to its end
        outputs = [await _next(wq) for _ in range(3)]
        assert all(isinstance(o, RequestOutput) for o in outputs) and outputs[-1].finished
        await asyncio.to_thread(ae.shutdown, 0.1)

    asyncio.run(main())


def test_a_thousand_aborts_leave_no_entries() -> None:
    engine = StepEngine()
    metrics = ServerMetrics("m")

    async def main() -> None:
        ae = AsyncEngine(
            lambda: engine, max_waiting=2000, on_output=metrics.observe_output, on_end=metrics.forget
        )
        ae.start(asyncio.get_running_loop())
        assert await asyncio.to_thread(ae.wait_ready, 5)
        for _ in range(10):
            queues = [await ae.submit([1], SamplingParams(max_tokens=1000)) for _ in range(100)]
            for req_id, aq in queues:
                assert isinstance(await _next(aq), RequestOutput)  # it ran: metrics know it
                ae.abort(req_id)
        for _ in range(100):  # the engine thread applies the last aborts
            if not engine.live and metrics.num_tracked == 0:
                break
            await asyncio.sleep(0.02)
        assert engine.live == {} and metrics.num_tracked == 0 and ae.num_open_requests == 0
        assert ae._tracked == {}
        await asyncio.to_thread(ae.shutdown, 1)

    asyncio.run(main())


def test_step_budget_follows_measured_time() -> None:
    budget = StepBudget(target_s=0.5, floor=64, ceiling=2048)
    assert budget.tokens == 64  # a short first step measures the rate
    assert budget.observe(64, 0.01) == 2048  # fast device: the configured chunk
    assert budget.observe(2048, 8.0) < 256  # slow: chunks of about 0.5 s
    assert budget.observe(1, 100.0) == budget.tokens  # a decode step says nothing about prefill
    assert StepBudget(0.5, 64, 2048).observe(64, 60.0) == 64  # never below the floor


def test_the_engine_prefills_a_long_prompt_in_timed_chunks(tiny_llama_dir: Path) -> None:
    from kvspill.engine.core import LLMEngine

    engine = LLMEngine(EngineConfig(model=str(tiny_llama_dir), device="cpu"))
    engine.limit_step_time(1e-6)  # any measured step is too long: every step gets the floor
    floor = max(4 * engine.config.block_size, engine.config.max_num_seqs)
    engine.add_request([i % 200 + 1 for i in range(900)], SamplingParams(max_tokens=1), "long")
    steps = 0
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
        if steps == 2:  # between chunks an abort takes effect
            engine.abort_request("long")
    assert steps == 2 and engine.scheduler.step_token_budget == floor
    engine.limit_step_time(None)
    assert engine.scheduler.step_token_budget is None
