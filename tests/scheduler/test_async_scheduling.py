"""The scheduler one step ahead (async scheduling): placeholders, length limits, stops, preemption."""

from __future__ import annotations

from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.request import Request, RequestStatus
from kvspill.scheduler.scheduler import Scheduler
from kvspill.types import StepOutput

BLOCK_SIZE = 4
EOS = 2


def _scheduler(num_blocks: int = 16, **overrides: object) -> Scheduler:
    config = dict(
        max_num_seqs=4,
        max_num_batched_tokens=32,
        max_model_len=64,
        block_size=BLOCK_SIZE,
        num_blocks=num_blocks,
        async_scheduling=True,
    )
    config.update(overrides)
    return Scheduler(SchedulerConfig(**config))  # type: ignore[arg-type]


def _request(req_id: str, prompt_len: int, **params: object) -> Request:
    params.setdefault("max_tokens", 16)
    return Request(
        req_id, list(range(10, 10 + prompt_len)), SamplingParams(**params), frozenset({EOS}), 0.0, 64
    )


def test_the_next_step_computes_the_placeholder_before_its_value_is_known():
    scheduler = _scheduler()
    request = _request("a", 5)
    scheduler.add_request(request)
    first = scheduler.schedule()
    assert first.num_scheduled_tokens == {"a": 5}
    assert (request.num_pending_tokens, request.num_tokens, request.num_computed_tokens) == (1, 5, 5)
    second = scheduler.schedule()  # before the first step's token is known
    assert second.num_scheduled_tokens == {"a": 1}
    assert (request.num_pending_tokens, request.num_computed_tokens) == (2, 6)
    updates = scheduler.update_from_output(first, StepOutput(sampled_token_ids={"a": [9]}))
    assert [u.new_token_ids for u in updates] == [[9]]
    assert (request.num_pending_tokens, request.output_token_ids) == (1, [9])
    scheduler.update_from_output(second, StepOutput(sampled_token_ids={"a": [11]}))
    assert (request.num_pending_tokens, request.output_token_ids, request.num_tokens) == (0, [9, 11], 7)
    assert request.block_hashes and len(request.block_hashes) == 7 // BLOCK_SIZE


def test_no_step_is_scheduled_past_max_tokens():
    scheduler = _scheduler()
    request = _request("a", 3, max_tokens=2)
    scheduler.add_request(request)
    first, second = scheduler.schedule(), scheduler.schedule()
    assert second.num_scheduled_tokens == {"a": 1}
    third = scheduler.schedule()  # both tokens it may produce are in flight
    assert third.num_scheduled_tokens == {}
    scheduler.update_from_output(first, StepOutput(sampled_token_ids={"a": [20]}))
    updates = scheduler.update_from_output(second, StepOutput(sampled_token_ids={"a": [21]}))
    assert updates[0].finished and updates[0].finish_reason == "length"
    assert request.output_token_ids == [20, 21]


def test_a_stop_token_drops_the_extra_step():
    scheduler = _scheduler()
    request = _request("a", 3)
    scheduler.add_request(request)
    first, second = scheduler.schedule(), scheduler.schedule()
    updates = scheduler.update_from_output(first, StepOutput(sampled_token_ids={"a": [EOS]}))
    assert updates[0].finished and updates[0].finish_reason == "stop"
    assert scheduler.update_from_output(second, StepOutput(sampled_token_ids={"a": [30]})) == []
    assert request.output_token_ids == [EOS]
    assert scheduler.kv_cache_manager.usage == 0.0
    assert "a" in scheduler.schedule().finished_req_ids


def test_a_request_preempted_with_its_token_in_flight_keeps_the_token():
    # 4 blocks of 4 tokens: a (8 tokens) and b (7) fill them; a's first decode needs a fifth block,
    # so b (the latest arrival) is preempted while its sampled token is still in flight.
    scheduler = _scheduler(num_blocks=4, enable_prefix_caching=False)
    a, b = _request("a", 8), _request("b", 7)
    scheduler.add_request(a)
    scheduler.add_request(b)
    first = scheduler.schedule()
    assert first.num_scheduled_tokens == {"a": 8, "b": 7}
    second = scheduler.schedule()
    assert b.status == RequestStatus.PREEMPTED and "b" not in second.num_scheduled_tokens
    updates = {
        u.req_id: u
        for u in scheduler.update_from_output(first, StepOutput(sampled_token_ids={"a": [40], "b": [41]}))
    }
    assert updates["b"].new_token_ids == [41] and not updates["b"].finished
    assert (b.output_token_ids, b.num_pending_tokens, b.num_computed_tokens) == ([41], 0, 0)
    scheduler.update_from_output(second, StepOutput(sampled_token_ids={"a": [42]}))
    scheduler.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    resumed = scheduler.schedule()
    assert resumed.num_scheduled_tokens == {"b": 8}  # recomputed with its kept token
    assert resumed.new_reqs[0].output_token_ids == [41]
