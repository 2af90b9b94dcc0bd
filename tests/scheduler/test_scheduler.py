"""Scheduler driven by a fake runner on a pool of 8 blocks of 4 tokens: exact token counts and block ids."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from kvspill.errors import ContextLengthExceededError, InvalidParameterError
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.request import Request, RequestStatus
from kvspill.scheduler.scheduler import Scheduler
from kvspill.types import RequestUpdate, ScheduledBatch, StepOutput

BLOCK_SIZE = 4
TOKEN = 7  # what the fake runner samples unless told otherwise
EOS = 2

CONFIG = SchedulerConfig(
    max_num_seqs=4,
    max_num_batched_tokens=32,
    max_model_len=64,
    block_size=BLOCK_SIZE,
    num_blocks=8,
    enable_prefix_caching=True,
)


def make_request(req_id: str, prompt: Sequence[int], max_model_len: int = 64, **params: object) -> Request:
    params.setdefault("max_tokens", 16)
    sampling_params = SamplingParams(**params)  # type: ignore[arg-type]
    return Request(req_id, prompt, sampling_params, frozenset({EOS}), 0.0, max_model_len, BLOCK_SIZE)


@dataclass
class _RunnerState:
    num_tokens: int
    num_computed_tokens: int
    block_ids: list[int]


@dataclass
class FakeRunner:
    """Keeps the runner's view of each request and checks the batch contract while doing so.

    Samples a token when a step reaches the end of a request's known tokens: the next one of
    `tokens[req_id]`, then TOKEN.
    """

    tokens: dict[str, list[int]] = field(default_factory=dict)
    state: dict[str, _RunnerState] = field(default_factory=dict)

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        for req_id in batch.finished_req_ids:
            self.state.pop(req_id, None)
        for new in batch.new_reqs:
            assert new.req_id not in self.state
            num_tokens = len(new.prompt_token_ids) + len(new.output_token_ids)
            self.state[new.req_id] = _RunnerState(num_tokens, new.num_computed_tokens, list(new.block_ids))
        for cached in batch.cached_reqs:
            state = self.state[cached.req_id]
            assert state.num_computed_tokens == cached.num_computed_tokens
            state.block_ids.extend(cached.new_block_ids)
        sampled: dict[str, list[int]] = {}
        for req_id, num_scheduled in batch.num_scheduled_tokens.items():
            state = self.state[req_id]
            state.num_computed_tokens += num_scheduled
            assert state.num_computed_tokens <= state.num_tokens
            assert len(state.block_ids) * BLOCK_SIZE >= state.num_computed_tokens
            if state.num_computed_tokens == state.num_tokens:
                queue = self.tokens.get(req_id)
                sampled[req_id] = [queue.pop(0) if queue else TOKEN]
                state.num_tokens += 1
            else:
                sampled[req_id] = []
        return StepOutput(sampled_token_ids=sampled)


def step(scheduler: Scheduler, runner: FakeRunner) -> tuple[ScheduledBatch, dict[str, RequestUpdate]]:
    batch = scheduler.schedule()
    updates = scheduler.update_from_output(batch, runner.execute(batch))
    return batch, {u.req_id: u for u in updates}


def run_to_completion(
    scheduler: Scheduler, runner: FakeRunner, max_steps: int = 200
) -> dict[str, RequestUpdate]:
    final: dict[str, RequestUpdate] = {}
    for _ in range(max_steps):
        if not scheduler.has_unfinished_requests():
            return final
        _, updates = step(scheduler, runner)
        final.update({req_id: u for req_id, u in updates.items() if u.finished})
    raise AssertionError("requests did not finish")


# ---- config and admission ----------------------------------------------------------------


def test_config_is_validated() -> None:
    with pytest.raises(InvalidParameterError, match="--max-num-seqs"):
        replace(CONFIG, max_num_seqs=0)
    with pytest.raises(InvalidParameterError):
        replace(CONFIG, long_prefill_token_threshold=-1)


def test_add_request_validates() -> None:
    scheduler = Scheduler(CONFIG)
    with pytest.raises(ContextLengthExceededError, match="maximum context length is 64 tokens"):
        scheduler.add_request(make_request("long", range(65)))
    with pytest.raises(InvalidParameterError):
        scheduler.add_request(make_request("empty", []))
    scheduler.add_request(make_request("a", [1]))
    with pytest.raises(ValueError):
        scheduler.add_request(make_request("a", [1]))
    with pytest.raises(ValueError, match="block_size"):
        scheduler.add_request(Request("b", [1], SamplingParams(), frozenset(), 0.0, 64, block_size=8))
    unbound = Request("c", range(9), SamplingParams(), frozenset(), 0.0, 64)
    scheduler.add_request(unbound)  # the scheduler binds its block size
    assert unbound.block_size == BLOCK_SIZE and len(unbound.block_hashes) == 2
    assert scheduler.get_num_unfinished_requests() == 2


def test_chunked_prefill_then_decode() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_batched_tokens=4))
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(10), max_tokens=3))
    batch, updates = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"a": 4}
    (new,) = batch.new_reqs
    assert new.block_ids == [0] and new.num_computed_tokens == 0 and new.output_token_ids == []
    assert updates == {}
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"a": 4}
    assert [(c.new_block_ids, c.num_computed_tokens) for c in batch.cached_reqs] == [([1], 4)]
    batch, updates = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"a": 2}
    assert batch.cached_reqs[0].new_block_ids == [2]
    assert updates["a"].new_token_ids == [TOKEN] and not updates["a"].finished
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"a": 1} and batch.cached_reqs[0].new_block_ids == []
    _, updates = step(scheduler, runner)
    assert updates["a"].finished and updates["a"].finish_reason == "length"
    assert not scheduler.has_unfinished_requests()
    assert scheduler.kv_cache_manager.num_free_blocks == 8


def test_long_prefill_threshold_caps_each_request() -> None:
    scheduler = Scheduler(replace(CONFIG, long_prefill_token_threshold=3))
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(10)))
    scheduler.add_request(make_request("b", range(100, 102)))
    counts = [step(scheduler, runner)[0].num_scheduled_tokens for _ in range(4)]
    assert counts == [{"a": 3, "b": 2}, {"a": 3, "b": 1}, {"a": 3, "b": 1}, {"a": 1, "b": 1}]


def test_mixed_prefill_and_decode_in_one_step() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_batched_tokens=6))
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(3)))
    step(scheduler, runner)
    scheduler.add_request(make_request("b", range(100, 110)))
    batch, updates = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"a": 1, "b": 5}
    assert [c.req_id for c in batch.cached_reqs] == ["a"] and [n.req_id for n in batch.new_reqs] == ["b"]
    assert list(updates) == ["a"]
    batch, updates = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"a": 1, "b": 5}
    assert set(updates) == {"a", "b"}


def test_max_num_seqs_limits_admission() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_seqs=2))
    runner = FakeRunner()
    for req_id in "abc":
        scheduler.add_request(make_request(req_id, [ord(req_id)], max_tokens=2))
    batch, _ = step(scheduler, runner)
    assert list(batch.num_scheduled_tokens) == ["a", "b"]
    assert (scheduler.num_running, scheduler.num_waiting) == (2, 1)
    batch, _ = step(scheduler, runner)  # a and b finish here
    assert list(batch.num_scheduled_tokens) == ["a", "b"]
    batch, _ = step(scheduler, runner)
    assert list(batch.num_scheduled_tokens) == ["c"] and batch.finished_req_ids == {"a", "b"}


def test_admission_is_fcfs_without_skipping() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_batched_tokens=64))  # blocks, not budget, limit
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(20)))  # 5 blocks
    scheduler.add_request(make_request("b", range(100, 116)))  # 4 blocks: does not fit
    scheduler.add_request(make_request("c", range(200, 202)))  # 1 block: would fit, must wait
    batch, _ = step(scheduler, runner)
    assert list(batch.num_scheduled_tokens) == ["a"]
    assert [r.req_id for r in scheduler.waiting] == ["b", "c"]


def test_prefix_hit_across_requests_and_stats() -> None:
    scheduler = Scheduler(CONFIG)
    runner = FakeRunner()
    prefix = list(range(8))
    scheduler.add_request(make_request("a", prefix + [50, 51]))
    step(scheduler, runner)
    scheduler.add_request(make_request("b", prefix + [60]))
    batch, updates = step(scheduler, runner)
    (new,) = batch.new_reqs
    assert new.block_ids == [0, 1, 3] and new.num_computed_tokens == 8
    assert batch.num_scheduled_tokens == {"a": 1, "b": 1}
    assert updates["b"].num_cached_tokens == 8 and updates["a"].num_cached_tokens == 0
    stats = scheduler.stats()
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (10 + 9, 8)
    assert (stats.num_running, stats.num_waiting) == (2, 0)
    assert stats.kv_cache_usage == pytest.approx(4 / 8)
    assert stats.prefix_cache_hit_rate == pytest.approx(8 / 19)


# ---- preemption --------------------------------------------------------------------------


def test_preemption_frees_the_latest_request_and_resumes_it_first() -> None:
    scheduler = Scheduler(CONFIG)
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(15), max_tokens=3))
    scheduler.add_request(make_request("b", range(100, 115)))
    batch, _ = step(scheduler, runner)
    assert [n.block_ids for n in batch.new_reqs] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    step(scheduler, runner)  # both decode in their 4th block; now 17 tokens each
    scheduler.add_request(make_request("c", [1]))

    batch, _ = step(scheduler, runner)  # a needs a 5th block: b goes
    assert batch.num_scheduled_tokens == {"a": 1}
    assert batch.cached_reqs[0].new_block_ids == [7]  # b's tail block, freed first
    assert batch.finished_req_ids == {"b"}
    b = scheduler.get_request("b")
    assert b is not None and b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert [r.req_id for r in scheduler.waiting] == ["b", "c"]
    assert scheduler.stats().num_preemptions == 1 and b.num_preemptions == 1
    assert scheduler.get_request("a") is None  # finished: 3 tokens

    batch, _ = step(scheduler, runner)
    new_b, new_c = batch.new_reqs
    assert new_b.req_id == "b" and new_b.output_token_ids == [TOKEN, TOKEN]
    assert new_b.block_ids == [4, 5, 6, 7, 3] and new_b.num_computed_tokens == 12  # 3 prefix hits
    assert new_c.block_ids == [2]
    assert batch.num_scheduled_tokens == {"b": 5, "c": 1}
    assert batch.finished_req_ids == {"a"}
    assert b.num_cached_tokens == 0  # the first schedule had no hit


def test_request_preempts_itself_when_it_is_the_latest() -> None:
    scheduler = Scheduler(CONFIG)
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(18), max_tokens=4))  # 5 blocks: room for 20 tokens
    scheduler.add_request(make_request("b", range(100, 111)))  # 3 blocks, room up to 12 tokens
    step(scheduler, runner)
    step(scheduler, runner)
    batch, _ = step(scheduler, runner)  # a still fits; b needs a 4th block and is the latest
    assert batch.num_scheduled_tokens == {"a": 1}
    assert batch.finished_req_ids == {"b"} and [r.req_id for r in scheduler.waiting] == ["b"]
    assert scheduler.kv_cache_manager.num_free_blocks == 3
    batch, _ = step(scheduler, runner)  # a takes b's freed tail block (evicting its hash), finishes
    assert batch.cached_reqs[0].new_block_ids == [7] and batch.new_reqs == []
    batch, _ = step(scheduler, runner)
    (new_b,) = batch.new_reqs
    assert new_b.block_ids == [5, 6, 7, 4] and new_b.num_computed_tokens == 8
    assert new_b.output_token_ids == [TOKEN, TOKEN] and batch.num_scheduled_tokens == {"b": 5}


# ---- finishing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "tokens", "expected"),
    [
        ({}, [5, EOS, 5], ([5, EOS], "stop", None)),
        ({"ignore_eos": True, "max_tokens": 3}, [EOS, EOS, EOS], ([EOS] * 3, "length", None)),
        ({"stop_token_ids": (9,)}, [5, 9], ([5, 9], "stop", 9)),
        ({"min_tokens": 2, "stop_token_ids": (9,)}, [EOS, 9, 9], ([EOS, 9], "stop", 9)),
        ({"max_tokens": 2}, [5, 5, 5], ([5, 5], "length", None)),
        ({"max_tokens": None}, [], ([TOKEN] * 4, "length", None)),  # 60 + 4 = max_model_len
        ({"max_tokens": 50}, [], ([TOKEN] * 4, "length", None)),
    ],
)
def test_finish_conditions(
    params: dict[str, object], tokens: list[int], expected: tuple[object, ...]
) -> None:
    scheduler = Scheduler(replace(CONFIG, num_blocks=16))
    runner = FakeRunner(tokens={"a": list(tokens)})
    request = make_request("a", range(100, 160), **params)
    scheduler.add_request(request)
    final = run_to_completion(scheduler, runner)
    assert (request.output_token_ids, final["a"].finish_reason, final["a"].stop_reason) == expected
    assert request.is_finished and scheduler.kv_cache_manager.num_free_blocks == 16


def test_abort_frees_blocks_and_tells_the_runner() -> None:
    scheduler = Scheduler(CONFIG)
    runner = FakeRunner()
    scheduler.add_request(make_request("a", range(10)))
    scheduler.add_request(make_request("b", range(100, 124)))  # a 22-token chunk needs 6 blocks: waits
    step(scheduler, runner)
    assert scheduler.kv_cache_manager.num_free_blocks == 5
    scheduler.abort_requests(["a", "b", "unknown"])
    assert scheduler.kv_cache_manager.num_free_blocks == 8
    assert not scheduler.has_unfinished_requests()
    batch = scheduler.schedule()
    assert batch.empty and batch.finished_req_ids == {"a", "b"}


def test_finish_requests_for_stop_strings_and_abort_between_steps() -> None:
    scheduler = Scheduler(CONFIG)
    runner = FakeRunner()
    a, b = make_request("a", range(4)), make_request("b", range(100, 104))
    scheduler.add_request(a)
    scheduler.add_request(b)
    batch = scheduler.schedule()
    scheduler.abort_requests("b")  # e.g. client gone while the step ran
    updates = scheduler.update_from_output(batch, runner.execute(batch))
    assert [u.req_id for u in updates] == ["a"]
    scheduler.finish_requests(["a"], RequestStatus.FINISHED_STOPPED)
    assert a.finish_reason == "stop" and b.finish_reason == "abort"
    assert scheduler.kv_cache_manager.num_free_blocks == 8
    with pytest.raises(ValueError):
        scheduler.finish_requests(["a"], RequestStatus.RUNNING)


def test_runner_failure_ends_only_that_request() -> None:
    scheduler = Scheduler(CONFIG)
    scheduler.add_request(make_request("a", range(4)))
    scheduler.add_request(make_request("b", range(100, 104)))
    batch = scheduler.schedule()
    output = StepOutput(sampled_token_ids={"a": [TOKEN], "b": [TOKEN]}, failed={"b": "out of memory"})
    updates = {u.req_id: u for u in scheduler.update_from_output(batch, output)}
    assert updates["b"].finished and updates["b"].finish_reason == "error"
    assert updates["b"].error == "out of memory" and updates["b"].new_token_ids == []
    assert not updates["a"].finished and scheduler.num_running == 1
    assert scheduler.kv_cache_manager.num_free_blocks == 7


def test_prompt_larger_than_the_pool_fails_instead_of_wedging() -> None:
    scheduler = Scheduler(CONFIG)  # 8 blocks: 32 tokens
    runner = FakeRunner()
    big = make_request("big", range(40))
    scheduler.add_request(big)
    scheduler.add_request(make_request("small", range(100, 104)))
    batch, updates = step(scheduler, runner)
    assert list(batch.num_scheduled_tokens) == ["small"]
    assert updates["big"].finish_reason == "error" and "needs 10 KV blocks" in (updates["big"].error or "")
    assert big.status == RequestStatus.FINISHED_ERROR


def test_decode_growing_past_the_pool_fails() -> None:
    scheduler = Scheduler(CONFIG)
    runner = FakeRunner()
    request = make_request("a", range(31), max_tokens=None)
    scheduler.add_request(request)
    final = run_to_completion(scheduler, runner)
    assert final["a"].finish_reason == "error" and request.num_tokens == 33
    assert scheduler.kv_cache_manager.num_free_blocks == 8


def test_a_time_sized_step_leaves_room_for_waiting_requests() -> None:
    """issue 48, item 7: with the server's time-sized budget a long running prefill leaves half a
    step to waiting requests, so a short request starts at once instead of after the whole prefill."""
    scheduler = Scheduler(replace(CONFIG, num_blocks=16))
    scheduler.step_token_budget = 8
    runner = FakeRunner()
    scheduler.add_request(make_request("long", range(40), max_tokens=2))
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"long": 8}  # nobody waits: the whole step
    scheduler.add_request(make_request("short", range(100, 103), max_tokens=1))
    batch, updates = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"long": 4, "short": 3}
    assert updates["short"].finished  # its one token came in the first step it waited
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"long": 8}
    scheduler.step_token_budget = None  # offline (no time-sized steps): first come first served
    scheduler.add_request(make_request("late", range(200, 203), max_tokens=1))
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"long": 20, "late": 3}
