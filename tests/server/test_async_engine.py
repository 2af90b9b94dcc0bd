"""AsyncEngine in-process with a fake engine: a failing step ends the requests in flight and the
loop keeps serving; add_request errors reach the caller."""

from __future__ import annotations

import asyncio

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.outputs import RequestOutput
from kvspill.sampling_params import SamplingParams
from kvspill.server.async_engine import AsyncEngine, ServerBusyError, StepFailedError


class FakeEngine:
    max_model_len = 64

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.fail_next = False
        self.aborted: list[str] = []

    def add_request(self, prompt, params, req_id, admission=False):
        if prompt == "bad":
            raise InvalidParameterError("prompt", "bad prompt")
        self.live[req_id] = params.max_tokens

    def abort_request(self, req_id):
        self.aborted.append(req_id)
        self.live.pop(req_id, None)

    def has_unfinished_requests(self):
        return bool(self.live)

    def step(self):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("boom")
        outs = []
        for req_id in list(self.live):
            self.live[req_id] -= 1
            done = self.live[req_id] == 0
            outs.append(RequestOutput(req_id, None, [1], delta_text="x", delta_token_ids=[5], finished=done,
                                      finish_reason="length" if done else None))
            if done:
                del self.live[req_id]
        return outs


async def _drain(aq: asyncio.Queue) -> object:
    while True:
        item = await asyncio.wait_for(aq.get(), 5)
        if isinstance(item, BaseException) or item.finished:
            return item


def test_failing_step_does_not_kill_loop():
    fake = FakeEngine()

    async def main() -> None:
        ae = AsyncEngine(lambda: fake, max_waiting=4)
        ae.start(asyncio.get_running_loop())
        assert await asyncio.to_thread(ae.wait_ready, 5)
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


def test_waiting_bound():
    async def main() -> None:
        ae = AsyncEngine(lambda: FakeEngine(), max_waiting=0)
        ae.start(asyncio.get_running_loop())
        await asyncio.to_thread(ae.wait_ready, 5)
        with pytest.raises(ServerBusyError):
            await ae.submit("p", SamplingParams())
        await asyncio.to_thread(ae.shutdown)

    asyncio.run(main())
