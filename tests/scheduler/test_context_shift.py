"""Context shift in the scheduler (scheduler/context_shift.py), on a pool of 4-token blocks: exact
block ids, tokens, hashes and the shift the runner gets."""

from __future__ import annotations

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.context_shift import num_tokens_to_drop
from kvspill.scheduler.request import Request, RequestStatus
from kvspill.scheduler.scheduler import Scheduler
from kvspill.types import ScheduledBatch, StepOutput

BS = 4
LEN = 32  # max_model_len: 8 blocks


def config(**kw: object) -> SchedulerConfig:
    base: dict[str, object] = dict(
        max_num_seqs=4, max_num_batched_tokens=64, max_model_len=LEN, block_size=BS, num_blocks=24,
        context_shift=True, context_shift_keep=8, num_sink_blocks=1,
    )  # fmt: skip
    base.update(kw)
    return SchedulerConfig(**base)  # type: ignore[arg-type]


def request(req_id: str, prompt: list[int], **params: object) -> Request:
    params.setdefault("max_tokens", 3 * LEN)
    params.setdefault("ignore_eos", True)
    return Request(req_id, prompt, SamplingParams(**params), frozenset({2}), 0.0, LEN)  # type: ignore[arg-type]


def step(scheduler: Scheduler, next_token: list[int]) -> ScheduledBatch:
    """Schedule, and sample the next of `next_token` for each request whose tokens the step ends."""
    batch = scheduler.schedule()
    sampled: dict[str, list[int]] = {}
    for req_id in batch.num_scheduled_tokens:
        r = scheduler.requests[req_id]
        if r.num_computed_tokens == r.num_tokens:
            next_token[0] += 1
            sampled[req_id] = [next_token[0]]
    scheduler.update_from_output(batch, StepOutput(sampled_token_ids=sampled))
    return batch


def run_to_shift(scheduler: Scheduler, next_token: list[int]) -> Request:
    """Step until request "a" has shifted once; returns it."""
    while scheduler.requests["a"].num_shifted_tokens == 0:
        step(scheduler, next_token)
    return scheduler.requests["a"]


def test_drop_is_whole_blocks_leaving_at_least_keep() -> None:
    assert num_tokens_to_drop(32, 4, 8, 4) == 20  # 28 after the sinks, 8 kept
    assert num_tokens_to_drop(32, 4, 10, 4) == 16  # 12 kept: a whole block more than asked
    assert num_tokens_to_drop(32, 4, 0, 4) == 12  # keep 0: half of the 28 after the sinks, in blocks
    assert num_tokens_to_drop(32, 0, 31, 4) == 4  # always at least one block


def test_full_context_drops_the_middle_and_goes_on() -> None:
    s = Scheduler(config())
    prompt = list(range(100, 110))
    s.add_request(request("a", prompt))
    counter = [1000]
    r = run_to_shift(s, counter)
    # 32 tokens reached: kept 4 sink tokens + the last 8, dropped 20 (5 blocks: logical 1-5)
    assert r.num_tokens == 12 and r.num_shifted_tokens == 20
    full = prompt + r.output_token_ids
    assert len(full) == LEN
    assert r.all_token_ids == full[:4] + full[24:]
    assert r.num_computed_tokens == 11  # the newest token still to compute
    assert r.status == RequestStatus.RUNNING
    table_before = list(range(8))  # blocks 0..7 in order from a fresh pool
    batch = s.schedule()
    (shift,) = batch.context_shifts
    assert shift.num_sink_tokens == 4 and shift.num_dropped_tokens == 20
    assert shift.block_ids == [table_before[0], table_before[6], table_before[7]]
    assert shift.rotations == [(6, 6), (7, 7)]  # in place: nobody shares them
    assert shift.num_kv_tokens == 11
    assert batch.num_scheduled_tokens == {"a": 1}
    # the dropped blocks are free again; the kept ones left the prefix cache under their old hashes
    kv = s.kv_cache_manager
    assert kv.get_block_ids(r) == [0, 6, 7]
    assert all(kv.block_pool.blocks[i].block_hash is None for i in (6,))
    assert kv.block_pool.blocks[0].block_hash == r.block_hashes[0]  # the sink block stays cached


def test_stream_of_three_contexts_keeps_generating() -> None:
    s = Scheduler(config())
    s.add_request(request("a", [5, 6, 7]))
    counter = [1000]
    while "a" in s.requests:
        step(s, counter)
        assert s.requests.get("a") is None or s.requests["a"].num_tokens <= LEN
    assert counter[0] - 1000 == 3 * LEN  # every token of max_tokens came out


def test_hashes_after_the_sinks_are_the_requests_own() -> None:
    s = Scheduler(config())
    prompt = list(range(100, 110))
    s.add_request(request("a", prompt))
    counter = [1000]
    r = run_to_shift(s, counter)
    fresh = request("b", r.all_token_ids)
    fresh.bind_block_size(BS, s.config.prefix_hash_seed)
    assert fresh.block_hashes[0] == r.block_hashes[0]
    assert fresh.block_hashes[1:] != r.block_hashes[1:]  # turned keys are never a fresh prefix


def test_shared_kept_block_is_copied() -> None:
    s = Scheduler(config())
    s.add_request(request("a", list(range(100, 128))))  # 28 tokens: 7 full blocks
    counter = [1000]
    step(s, counter)
    kv = s.kv_cache_manager
    shared = kv.get_blocks("a")[6]
    assert shared is not None
    kv.block_pool.touch([shared])  # another holder of logical block 6 (a prefix hit would do this)
    run_to_shift(s, counter)
    (shift,) = s.schedule().context_shifts
    # kept: logical 6 (shared: copied into a fresh block) and 7 (a's own: turned in place)
    (src6, dst6), (src7, dst7) = shift.rotations
    assert src6 == shared.block_id and dst6 != src6 and src7 == dst7
    assert shared.ref_cnt == 1 and shared.block_hash is not None  # the other holder's, untouched
    assert shift.block_ids == [0, dst6, 7]


def test_overlap_recomputes_the_last_kept_tokens() -> None:
    s = Scheduler(config(context_shift_overlap=6))
    s.add_request(request("a", [5, 6, 7]))
    counter = [1000]
    r = run_to_shift(s, counter)
    assert r.num_tokens == 12 and r.num_computed_tokens == 12 - 1 - 6
    batch = s.schedule()
    assert batch.num_scheduled_tokens == {"a": 7}
    assert batch.context_shifts[0].num_kv_tokens == 11  # turned, then 6 of them written again


def test_without_the_flag_the_context_ends_the_request() -> None:
    s = Scheduler(config(context_shift=False))
    s.add_request(request("a", [5, 6, 7]))
    counter = [1000]
    while "a" in s.requests:
        step(s, counter)
    assert counter[0] - 1000 == LEN - 3


def test_per_request_override() -> None:
    s = Scheduler(config(context_shift=False))
    s.add_request(request("a", [5, 6, 7], context_shift=True))
    counter = [1000]
    while "a" in s.requests:
        step(s, counter)
    assert counter[0] - 1000 == 3 * LEN


def test_prompt_logprobs_requests_never_shift() -> None:
    s = Scheduler(config())
    s.add_request(request("a", [5, 6, 7], prompt_logprobs=0))
    assert s.requests["a"].context_shift is False


def test_refusals() -> None:
    with pytest.raises(InvalidParameterError, match="--context-shift-keep 28 leaves no block"):
        config(context_shift_keep=28)
    s = Scheduler(config(context_shift=False, num_cpu_blocks=4))
    with pytest.raises(InvalidParameterError, match="--cpu-kv-budget 0"):
        s.add_request(request("a", [5, 6, 7], context_shift=True))
