"""AsyncEngine in-process with a fake engine: a failing step ends the requests in flight and the
loop keeps serving; add_request errors reach the caller; the waiting bounds (requests and prompt
tokens) refuse new groups only while something waits; abort_all ends what is in flight."""

from __future__ import annotations

import asyncio

import pytest

from kvspill.engine.client import EngineClient
from kvspill.errors import ContextLengthExceededError, InvalidParameterError, KVCacheBusyError
from kvspill.sampling_params import SamplingParams
from kvspill.server.async_engine import AsyncEngine, EngineUnavailableError, ServerBusyError, StepFailedError
from kvspill.stats import KVStats, SchedulerStats
from kvspill.types import RequestOutput

HOLD = 7  # a prompt holding this token id gets no output (it keeps waiting) until released


class FakeEngine:
    """An `EngineClient`: each step gives every live request one token, until its max_tokens."""

    max_model_len = 64
    context_shift = False
    vocab_size = 100
    tokenizer = None
    guided_compiler = None

    def __init__(self, kv_room: int | None = None) -> None:
        self.live: dict[str, int] = {}
        self.held: set[str] = set()
        self.fail_next = False
        self.aborted: list[str] = []
        # With a room: requests commit prompt + max_tokens tokens of it, and a request past what is
        # left raises KVCacheBusyError (LLMEngine.check_admission's rule).
        self.kv_room = kv_room
        self.committed: dict[str, int] = {}
        self.refused: list[int] = []  # the first id of each prompt refused for room
        self.added: list[int] = []  # the first id of each prompt added

    def kv_tokens_needed(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        return num_prompt_tokens + (params.max_tokens or 0)

    def kv_capacity_tokens(self) -> int:
        return 1000

    def encode(self, prompt: str) -> list[int]:
        return [len(w) for w in prompt.split()]

    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        return self.encode(prompt) if isinstance(prompt, str) else list(prompt)

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        req_id: str | None = None,
        admission: bool = False,
    ) -> str:
        assert params is not None and params.max_tokens is not None and req_id is not None
        if prompt == [3]:  # "bad"
            raise InvalidParameterError("prompt", "bad prompt")
        need = len(prompt) + params.max_tokens
        if self.kv_room is not None and sum(self.committed.values()) + need > self.kv_room:
            self.refused.append(prompt[0])
            raise KVCacheBusyError("no KV room now: retry later")
        self.committed[req_id] = need
        self.added.append(prompt[0])
        self.live[req_id] = params.max_tokens
        if HOLD in prompt:
            self.held.add(req_id)
        return req_id

    def abort_request(self, req_id: str) -> None:
        self.aborted.append(req_id)
        self.live.pop(req_id, None)
        self.committed.pop(req_id, None)
        self.held.discard(req_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.live)

    def kv_stats(self) -> KVStats:
        return KVStats()

    def step(self) -> list[RequestOutput]:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("boom")
        outs = []
        for req_id in [r for r in self.live if r not in self.held]:
            self.live[req_id] -= 1
            done = self.live[req_id] == 0
            outs.append(
                RequestOutput(
                    req_id,
                    None,
                    [1],
                    delta_text="x",
                    delta_token_ids=[5],
                    finished=done,
                    finish_reason="length" if done else None,
                )
            )
            if done:
                del self.live[req_id]
                self.committed.pop(req_id, None)
        return outs


def test_the_fake_is_an_engine_client() -> None:
    engine: EngineClient = FakeEngine()  # mypy checks the fake against the server's interface
    assert isinstance(engine, EngineClient)


async def _drain(aq: asyncio.Queue) -> object:
    while True:
        item = await asyncio.wait_for(aq.get(), 5)
        if isinstance(item, BaseException) or item.finished:
            return item


async def _started(fake: FakeEngine, **kw) -> AsyncEngine:
    ae = AsyncEngine(lambda: fake, **kw)
    ae.start(asyncio.get_running_loop())
    assert await asyncio.to_thread(ae.wait_ready, 5)
    return ae


def test_failing_step_does_not_kill_loop():
    fake = FakeEngine()

    async def main() -> None:
        ae = await _started(fake, max_waiting=4)
        fake.fail_next = True
        _, aq = await ae.submit("p", SamplingParams(max_tokens=3))
        assert isinstance(await _drain(aq), StepFailedError)
        _, aq = await ae.submit("p", SamplingParams(max_tokens=3))  # still serving
        final = await _drain(aq)
        assert isinstance(final, RequestOutput) and final.finish_reason == "length"
        with pytest.raises(InvalidParameterError):
            await ae.submit("bad", SamplingParams())
        await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())
    assert fake.aborted  # the failed request was aborted in the engine


def test_group_is_all_or_nothing():
    fake = FakeEngine()

    async def main() -> None:
        ae = await _started(fake)
        with pytest.raises(InvalidParameterError):
            await ae.submit_many([("p", SamplingParams()), ("bad", SamplingParams())])
        ids, aq = await ae.submit_many(
            [("p", SamplingParams(max_tokens=2)), ([1, 2], SamplingParams(max_tokens=3))]
        )
        finished = set()
        while len(finished) < 2:
            item = await asyncio.wait_for(aq.get(), 5)
            if item.finished:
                finished.add(item.req_id)
        assert finished == set(ids)
        await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())
    assert len(fake.aborted) == 1  # the first request of the refused group was taken back


async def _refused(fake: FakeEngine, first_id: int) -> None:
    """Until the engine has refused (for room) a prompt starting with `first_id`: it is held."""
    for _ in range(500):
        if first_id in fake.refused:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the prompt starting with {first_id} was never held for room")


def test_a_request_without_kv_room_waits_for_it_instead_of_a_503():
    """Running requests have committed the KV room: the next waits (no ServerBusyError) and runs
    once the first finishes; one that leaves while it waits never reaches the engine; shutdown
    ends one that waits."""
    fake = FakeEngine(kv_room=30)
    fake.kv_stats = lambda: KVStats(scheduler=SchedulerStats())  # type: ignore[method-assign]

    async def main() -> None:
        ae = await _started(fake)
        first_id, first = await ae.submit([HOLD] * 10, SamplingParams(max_tokens=10))  # 20 of 30
        second = asyncio.create_task(ae.submit([2] * 10, SamplingParams(max_tokens=10)))
        await _refused(fake, 2)
        stats = await ae.kv_stats()  # the request held for room counts as waiting
        assert stats.scheduler is not None and stats.scheduler.num_waiting == 1
        fake.held.discard(first_id)  # the first runs to its end and frees its room
        assert (await _drain(first)).finished
        _, aq = await asyncio.wait_for(second, 5)
        assert (await _drain(aq)).finished
        holder, _ = await ae.submit([HOLD] * 10, SamplingParams(max_tokens=10))
        gone = asyncio.create_task(ae.submit([4] * 10, SamplingParams(max_tokens=10)))
        await _refused(fake, 4)
        gone.cancel()  # the client left while it waited for room
        with pytest.raises(asyncio.CancelledError):
            await gone
        stuck = asyncio.create_task(ae.submit([5] * 10, SamplingParams(max_tokens=10)))
        await _refused(fake, 5)
        ae.abort_all("shutting down")
        with pytest.raises(EngineUnavailableError, match="shutting down"):
            await asyncio.wait_for(stuck, 5)
        await asyncio.to_thread(ae.shutdown)
        assert holder in fake.aborted
        assert 4 not in fake.added and 5 not in fake.added  # neither left the waiting line

    asyncio.run(main())
    assert fake.live == {} and fake.committed == {}


def test_waiting_bounds_requests_and_tokens():
    fake = FakeEngine()

    async def main() -> None:
        ae = await _started(fake, max_waiting=3, max_queued_tokens=10)
        # Nothing waits: a group larger than both bounds is still admitted (never refused forever).
        held, _ = await ae.submit_many([([HOLD] * 6, SamplingParams())] * 4)
        with pytest.raises(ServerBusyError, match="requests are already waiting"):
            await ae.submit([1], SamplingParams())
        ae.abort(*held)
        held, _ = await ae.submit([HOLD] * 8, SamplingParams())
        with pytest.raises(ServerBusyError, match="8 prompt tokens are already waiting"):
            await ae.submit([1, 2, 3], SamplingParams())
        _, aq = await ae.submit([1, 2], SamplingParams(max_tokens=2))  # 8 + 2 fits
        assert (await _drain(aq)).finished
        ae.abort(held)
        _, aq = await ae.submit([1, 2, 3], SamplingParams(max_tokens=1))  # nothing waits any more
        assert (await _drain(aq)).finished
        await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())


def test_default_queued_tokens_and_abort_all():
    fake = FakeEngine()

    async def main() -> None:
        ae = await _started(fake)
        assert ae.max_queued_tokens == 8 * fake.max_model_len
        _, aq = await ae.submit([HOLD], SamplingParams())
        ae.abort_all("shutting down")
        item = await _drain(aq)
        assert isinstance(item, EngineUnavailableError) and "shutting down" in str(item)
        await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())
    assert fake.live == {}


def test_default_queued_tokens_is_what_the_kv_tiers_hold_when_that_is_more():
    # 32 clients of 2K-token prompts on a 4K context must all be able to wait when the pool
    # holds their KV (8 contexts alone refused most of them: issue 55's bench serve run)
    from kvspill.server.async_engine import default_queued_tokens
    from kvspill.stats import KVTiers, TierUsage

    fake = FakeEngine()
    tiers = KVTiers(gpu=TierUsage(blocks=4000), cpu=TierUsage(blocks=1000))
    fake.kv_stats = lambda: KVStats(block_size=16, tiers=tiers)  # type: ignore[method-assign]
    assert default_queued_tokens(fake) == max(5000 * 16, 8 * fake.max_model_len)
    fake.kv_stats = lambda: KVStats(block_size=16, tiers=KVTiers(gpu=TierUsage(blocks=2)))  # type: ignore[method-assign]
    assert default_queued_tokens(fake) == 8 * fake.max_model_len


class SlowStepEngine(FakeEngine):
    """Every step takes `step_s`; kv_stats counts how often the loop thread asked."""

    step_s = 1.5

    def __init__(self) -> None:
        super().__init__()
        self.kv_calls = 0

    def kv_stats(self) -> KVStats:
        self.kv_calls += 1
        return KVStats(block_size=self.kv_calls)  # the call count rides in a field nothing else reads

    def step(self):
        import time

        time.sleep(self.step_s)
        return super().step()


def test_kv_snapshot_answers_at_once_during_a_long_step():
    async def main():
        fake = SlowStepEngine()
        ae = await _started(fake)
        try:
            for _ in range(50):  # the idle loop publishes a first snapshot
                if ae.kv_snapshot() is not None:
                    break
                await asyncio.sleep(0.05)
            _, aq = await ae.submit([1, 2], SamplingParams(max_tokens=2))
            await asyncio.sleep(0.3)  # the first (1.5 s) step is running now
            loop = asyncio.get_running_loop()
            start = loop.time()
            snapshot = await ae.kv_stats()  # the loop is inside the step: the snapshot answers
            assert loop.time() - start < 0.5
            assert snapshot.snapshot_age_s is not None and snapshot.snapshot_age_s >= 0.25
            assert (await _drain(aq)).finished
            for _ in range(50):  # republished between steps, no older than the interval then
                snapshot = ae.kv_snapshot()
                assert snapshot is not None
                if snapshot.block_size > 1:
                    break
                await asyncio.sleep(0.05)
            assert snapshot.block_size > 1
            fresh = await ae.kv_stats()  # idle loop: answered fresh, not from the snapshot
            assert fresh.snapshot_age_s is None and fresh.block_size > snapshot.block_size
            assert "snapshot_age_s" in snapshot.to_json() and "snapshot_age_s" not in fresh.to_json()
        finally:
            await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())


def test_a_prompt_past_the_context_is_a_400_even_when_the_queue_is_full():
    """A full queue answers 503 "retry later"; a prompt that can never fit must not get it."""
    fake = FakeEngine()

    async def main() -> None:
        ae = await _started(fake, max_waiting=1)
        held, _ = await ae.submit([HOLD], SamplingParams())  # the one waiting place is taken
        with pytest.raises(
            ContextLengthExceededError, match="is 64 tokens. However, your request has 64 input"
        ):
            await ae.submit([1] * 64, SamplingParams())
        with pytest.raises(ContextLengthExceededError, match="asks for 60 output tokens"):
            await ae.submit([1] * 10, SamplingParams(max_tokens=60))
        with pytest.raises(ServerBusyError):
            await ae.submit([1], SamplingParams())  # one that fits is told to retry
        ae.abort(held)
        await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())
