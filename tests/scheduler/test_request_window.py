"""Each request's own window on the gpu tier (`hot_window_tokens`, `num_sink_blocks` in its
`SamplingParams`): placement by its window, exact block ids; bounded by the scheduler's; the
scheduler's when absent; shown in `tier_stats()`. 8 gpu blocks of 4 tokens (test_tiers.CONFIG:
one sink block, an 8-token window)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.request import Request
from kvspill.scheduler.scheduler import Scheduler
from kvspill.stats import RequestTierStats

from .test_tiers import CONFIG, CPU, GPU, TierRunner, assert_all_free, make_request, move, step, table


def _three_requests(**b_window: int) -> tuple[Scheduler, list]:
    """a and b (12 tokens each, 3 blocks) run; c (12 tokens) arrives when 2 gpu blocks are left
    and a, b each open a block: 3 must spill. a keeps the scheduler's window; b asks `b_window`."""
    scheduler = Scheduler(CONFIG)
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(12), max_tokens=4))
    scheduler.add_request(make_request("b", range(100, 112), max_tokens=4, **b_window))
    batch, _ = step(scheduler, runner)
    assert [n.block_ids for n in batch.new_reqs] == [[0, 1, 2], [3, 4, 5]]
    scheduler.add_request(make_request("c", range(200, 212), max_tokens=4))
    batch, _ = step(scheduler, runner)
    return scheduler, batch.transfers.moves


def test_two_requests_with_different_windows_spill_as_their_windows_say() -> None:
    # a (c=12, 1 sink, window 8): only block 1 would be below its window and past its sink, and
    # (12 - 8) // 4 = 1 leaves none. b (no sink, no window): all three of its blocks may leave.
    scheduler, moves = _three_requests(hot_window_tokens=0, num_sink_blocks=0)
    assert moves == [
        move("b", 0, (GPU, 3), (CPU, 0)),
        move("b", 1, (GPU, 4), (CPU, 1)),
        move("b", 2, (GPU, 5), (CPU, 2)),
    ]
    assert table(scheduler, "a") == [(GPU, 0), (GPU, 1), (GPU, 2), (GPU, 6)]
    assert table(scheduler, "b") == [(CPU, 0), (CPU, 1), (CPU, 2), (GPU, 7)]
    assert table(scheduler, "c") == [(GPU, 3), (GPU, 4), (GPU, 5)]
    stats = scheduler.tier_stats()
    assert stats["a"] == RequestTierStats("running", 4, 0, 0, hot_window_tokens=8, num_sink_blocks=1)
    assert stats["b"] == RequestTierStats("running", 1, 3, 0, hot_window_tokens=0, num_sink_blocks=0)
    assert stats["c"] == RequestTierStats("running", 3, 0, 0, hot_window_tokens=8, num_sink_blocks=1)


def test_one_field_keeps_the_other_at_the_schedulers() -> None:
    # b keeps its sink (the scheduler's 1) with no window: blocks 1 and 2 leave, c waits for a third.
    scheduler, moves = _three_requests(hot_window_tokens=0)
    assert moves == []  # spills are all or nothing: 2 eligible blocks for a deficit of 3
    assert table(scheduler, "b") == [(GPU, 3), (GPU, 4), (GPU, 5), (GPU, 7)]
    assert scheduler.get_request("c") in scheduler.waiting
    assert scheduler.tier_stats()["b"].num_sink_blocks == 1
    assert scheduler.tier_stats()["b"].hot_window_tokens == 0


def test_without_the_fields_nothing_spills_and_c_waits() -> None:
    scheduler, moves = _three_requests()
    assert moves == []
    assert table(scheduler, "b") == [(GPU, 3), (GPU, 4), (GPU, 5), (GPU, 7)]
    assert scheduler.get_request("c") in scheduler.waiting
    assert {r: (s.hot_window_tokens, s.num_sink_blocks) for r, s in scheduler.tier_stats().items()} == {
        "a": (8, 1),
        "b": (8, 1),
    }


@pytest.mark.parametrize(
    ("field", "value", "limit"), [("hot_window_tokens", 9, 8), ("num_sink_blocks", 2, 1)]
)
def test_a_window_past_the_schedulers_is_refused_naming_the_field_and_the_limit(
    field: str, value: int, limit: int
) -> None:
    scheduler = Scheduler(CONFIG)
    with pytest.raises(InvalidParameterError, match=f"{field}: at most {limit} on this server") as e:
        scheduler.add_request(make_request("a", range(12), **{field: value}))
    assert e.value.param == field
    assert not scheduler.requests and not scheduler.waiting and not scheduler._windows
    scheduler.add_request(make_request("a", range(12), **{field: limit}))  # the limit itself is fine
    assert scheduler.requests


def test_negative_or_non_integer_windows_are_refused_by_the_params() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidParameterError, match="hot_window_tokens: must be a non-negative integer"):
            SamplingParams(hot_window_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="num_sink_blocks"):
        SamplingParams(num_sink_blocks=-2)


def test_asking_for_the_schedulers_own_window_changes_nothing() -> None:
    """The same random workload, with no window fields and with the scheduler's own values: the
    same batches, moves included (the default path is unchanged)."""

    def run(**window: int) -> list:
        rng = random.Random(7)
        scheduler, runner, seen = Scheduler(replace(CONFIG, max_num_batched_tokens=16)), TierRunner(), []
        for i in range(6):
            prompt = [rng.randint(1, 9) for _ in range(rng.randint(8, 30))]
            scheduler.add_request(make_request(f"r{i}", prompt, max_tokens=rng.randint(4, 16), **window))
        while scheduler.has_unfinished_requests():
            batch, _ = step(scheduler, runner)
            seen.append((batch.num_scheduled_tokens, batch.transfers.moves, batch.finished_req_ids))
        return seen

    plain = run()
    assert sum(len(moves) for _, moves, _ in plain) > 0  # the tiers were in use
    assert run(hot_window_tokens=8, num_sink_blocks=1) == plain


def _check_own_placement(scheduler: Scheduler, request: Request) -> None:
    """The request's own sinks and window are on the gpu (cold prefix hits excepted)."""
    s = scheduler.tier_stats()[request.req_id]
    c, tiers = request.num_computed_tokens, scheduler.kv_tiers
    for idx, (tier, block_id) in enumerate(table(scheduler, request.req_id)):
        hot = idx < s.num_sink_blocks or (idx + 1) * 4 > c - s.hot_window_tokens
        assert tier == GPU or not hot or tiers._pool(tier).is_cached(block_id), (request.req_id, idx, c)


@pytest.mark.parametrize("seed", range(12))
def test_random_mixed_windows_keep_each_requests_own_placement(seed: int) -> None:
    """Requests with random windows (shared prefixes among them) run to the end through the fake
    runner that checks every computed token is where its table says; each running request's own
    sinks and window stay on the gpu; every block is free at the end."""
    rng = random.Random(seed)
    config = replace(CONFIG, num_blocks=rng.randint(8, 10), max_num_batched_tokens=rng.choice([8, 16]))
    scheduler, runner = Scheduler(config), TierRunner()
    prefix = list(range(100, 112))
    for i in range(8):
        window = {"hot_window_tokens": rng.choice([0, 1, 4, 8]), "num_sink_blocks": rng.randint(0, 1)}
        prompt = prefix[: rng.choice([0, 8, 12])] + [rng.randint(1, 9) for _ in range(rng.randint(1, 24))]
        scheduler.add_request(make_request(f"r{i}", prompt, max_tokens=rng.randint(1, 16), **window))
    for _ in range(400):
        step(scheduler, runner)
        for request in scheduler.running:
            _check_own_placement(scheduler, request)
        if not scheduler.has_unfinished_requests():
            break
    assert not scheduler.has_unfinished_requests(), f"stuck: {scheduler.requests}"
    step(scheduler, runner)  # the runner drops the last finished requests
    assert_all_free(scheduler)
    assert not scheduler._windows  # forgotten with their requests
