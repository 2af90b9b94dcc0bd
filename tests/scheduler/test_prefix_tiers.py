"""Prefix cache in the cold tiers, scheduler side: exact block ids (4 gpu blocks of 4 tokens).

A finished request's cold blocks stay findable by prefix hash; a later request with the same
prefix references them in place (ref-counted), the fake runner of `test_tiers.py` checking that
every computed token is where the block table says; in-use cold blocks are never evicted.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kvspill.kv.cold_pool import ColdBlockPool
from kvspill.scheduler.scheduler import Scheduler
from kvspill.storage.transfer import CopyRun, group_moves
from kvspill.types import TIER_CPU

from .test_tiers import (
    CONFIG,
    CPU,
    DISK,
    GPU,
    TierRunner,
    _check_books,
    _random_config,
    assert_all_free,
    make_request,
    move,
    step,
    table,
)

PREFIX = list(range(100, 124))  # 6 full blocks
SMALL = replace(
    CONFIG, num_blocks=4, max_num_batched_tokens=4, hot_window_tokens=4, num_cpu_blocks=4, num_disk_blocks=4
)


def _run_all(scheduler: Scheduler, runner: TierRunner) -> None:
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)


def _finish_prefix_request(config=SMALL) -> tuple[Scheduler, TierRunner]:
    scheduler, runner = Scheduler(config), TierRunner()
    scheduler.add_request(make_request("a", PREFIX + [7], max_tokens=1))
    _run_all(scheduler, runner)
    return scheduler, runner


def test_a_finished_requests_cold_blocks_stay_findable_lru_prefix_start_last():
    scheduler, _ = _finish_prefix_request()
    tiers = scheduler.kv_tiers
    # logical blocks 1, 2, 3 spilled to cpu 0, 1, 2; freed last block first: block 3 (cpu 2) is
    # the least recently used, the prefix start (cpu 0) the last to go.
    assert tiers.cpu.cached_free_block_ids() == [2, 1, 0]
    assert tiers.cpu.free_block_ids() == [3, 2, 1, 0]
    assert tiers.cpu.num_used_blocks == 0 and tiers.cpu.num_cached_blocks == 3
    assert scheduler.stats().kv_tiers.prefix_cached_blocks == {"gpu": 3, "cpu": 3, "disk": 0}


def test_a_cpu_prefix_hit_is_attended_in_place_with_gpu_hits_around_it():
    scheduler, runner = _finish_prefix_request()
    scheduler.add_request(make_request("b", PREFIX + [8, 9], max_tokens=2))
    batch, updates = step(scheduler, runner)  # the fake runner checks every computed token's bytes
    (new_b,) = batch.new_reqs
    assert new_b.num_computed_tokens == 24 and batch.num_scheduled_tokens == {"b": 2}
    assert list(zip(new_b.block_tiers, new_b.block_ids, strict=True)) == [
        (GPU, 0), (CPU, 0), (CPU, 1), (CPU, 2), (GPU, 1), (GPU, 2), (GPU, 3)
    ]  # fmt: skip
    assert batch.transfers.moves == []  # nothing copied
    assert updates["b"].num_cached_tokens == 24
    tiers = scheduler.kv_tiers
    assert [tiers.cpu.ref_cnt(i) for i in range(4)] == [1, 1, 1, 0]
    stats = scheduler.stats()
    assert stats.kv_tiers.prefix_hit_tokens == {"gpu": 12, "cpu": 12, "disk": 0}
    assert stats.prefix_cache_hits == 24
    _run_all(scheduler, runner)
    assert tiers.cpu.num_used_blocks == 0 and tiers.cpu.cached_free_block_ids() == [2, 1, 0]


def test_a_disk_prefix_hit_when_there_is_no_cpu_tier():
    scheduler, runner = _finish_prefix_request(replace(SMALL, num_cpu_blocks=0))
    assert scheduler.kv_tiers.disk.cached_free_block_ids() == [2, 1, 0]
    scheduler.add_request(make_request("b", PREFIX + [8], max_tokens=1))
    batch, updates = step(scheduler, runner)
    assert list(zip(batch.new_reqs[0].block_tiers, batch.new_reqs[0].block_ids, strict=True))[:4] == [
        (GPU, 0), (DISK, 0), (DISK, 1), (DISK, 2)
    ]  # fmt: skip
    assert updates["b"].num_cached_tokens == 24


def test_cold_hits_in_use_are_never_evicted_by_other_requests_spills():
    scheduler, runner = _finish_prefix_request()
    tiers = scheduler.kv_tiers
    scheduler.add_request(make_request("b", PREFIX + [8], max_tokens=30))
    step(scheduler, runner)
    held = table(scheduler, "b")[1:4]
    assert held == [(CPU, 0), (CPU, 1), (CPU, 2)]
    # c spills 1 + 2 + ... blocks while b holds its hits: cpu 3 first, then on to disk.
    scheduler.add_request(make_request("c", list(range(300, 340)), max_tokens=1))
    for _ in range(12):
        step(scheduler, runner)
    assert table(scheduler, "b")[1:4] == held
    assert [tiers.cpu.ref_cnt(i) for i in range(3)] == [1, 1, 1]
    assert all(tiers.cpu.lookup(h) == i for i, h in enumerate(scheduler.requests["b"].block_hashes[1:4]))
    assert tiers.disk.num_used_blocks > 0  # c's cold blocks went past the full cpu tier
    _run_all(scheduler, runner)


def test_prefix_caching_off_caches_nothing_cold():
    scheduler, runner = _finish_prefix_request(replace(SMALL, enable_prefix_caching=False))
    assert scheduler.kv_tiers.cpu.num_cached_blocks == 0
    scheduler.add_request(make_request("b", PREFIX + [8], max_tokens=1))
    batch, _ = step(scheduler, runner)
    assert batch.new_reqs[0].num_computed_tokens == 0
    assert scheduler.requests["b"].num_cached_tokens == 0


def test_cold_pool_lru_evicts_cached_free_blocks_only_after_free_ones():
    pool = ColdBlockPool(TIER_CPU, 3)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]
    assert pool.cache(0, 10) and pool.cache(1, 11)
    assert not pool.cache(2, 10)  # one block per hash
    pool.free(2)
    pool.free(1)
    pool.free(0)
    assert pool.free_block_ids() == [2, 1, 0] and pool.num_free_blocks == 3
    pool.touch(0)  # a hit: in use again, not evictable
    assert pool.allocate() == 2  # a free block before any cached one
    assert pool.allocate() == 1 and pool.lookup(11) is None and pool.num_evicted == 1
    with pytest.raises(ValueError, match="no free block"):
        pool.allocate()  # block 0 is in use: never evicted
    assert pool.lookup(10) == 0
    pool.free(0)
    assert pool.cached_free_block_ids() == [0]
    with pytest.raises(ValueError, match="freed more often"):
        pool.free(0)


# 71: once room reclaimed from a parked request stayed pinned for the writer (a crash)
@pytest.mark.parametrize("seed", [*range(30), 71])
def test_random_schedules_with_long_shared_prefixes_and_persist_pins(seed: int) -> None:
    """`test_tiers.py`'s random schedule with long shared prefixes (many cold hits) and, in half of
    the seeds, the persist writer's pins on newly cached cold blocks, released at random later."""
    rng = random.Random(seed)
    config = replace(
        _random_config(rng),
        enable_prefix_caching=True,
        num_cpu_blocks=rng.choice([2, 4, 8, 12]),
        num_disk_blocks=rng.choice([0, 4, 8]),
    )
    scheduler, runner = Scheduler(config), TierRunner()
    pinning = seed % 2 == 1
    if pinning:
        scheduler.kv_tiers.prefix.newly_cached = []
    pins: list[tuple[int, int]] = []
    prefixes = [list(range(100, 124)), list(range(200, 220))]
    num_requests = 14
    for i in range(600):
        if i < 250 and rng.random() < 0.15 and num_requests > 0:
            num_requests -= 1
            prompt = rng.choice(prefixes)[: rng.randint(8, 24)] + [
                rng.randint(1, 9) for _ in range(rng.randint(1, 20))
            ]
            scheduler.add_request(make_request(f"r{i}", prompt, max_tokens=rng.randint(1, 16)))
        if rng.random() < 0.02 and scheduler.requests:
            scheduler.abort_requests(rng.choice(sorted(scheduler.requests)))
        step(scheduler, runner)  # the fake runner checks every computed token's bytes
        if pinning:
            pins += [(tier, b) for tier, b, _ in scheduler.kv_tiers.prefix.take_newly_cached() if tier != GPU]
            while pins and rng.random() < 0.5:
                scheduler.kv_tiers.prefix.release_pin(*pins.pop(0))
        else:
            _check_books(scheduler)
        if num_requests == 0 and not scheduler.has_unfinished_requests():
            break
    assert not scheduler.has_unfinished_requests(), f"stuck: {scheduler.requests}"
    for pin in pins:
        scheduler.kv_tiers.prefix.release_pin(*pin)
    step(scheduler, runner)
    assert_all_free(scheduler)


def test_an_evicted_gpu_prefix_block_is_demoted_to_the_cpu_tier_and_hit_there():
    """Nothing spills: a finished request's 3 full blocks stay cached on the gpu only. Another
    request reuses one of them, which is first copied into the cpu tier's cache (a bytes-only
    move before the step's writes); a third request with the prefix then hits it there, and the
    fake runner checks the bytes of every computed token."""
    scheduler, runner = Scheduler(SMALL), TierRunner()
    tiers = scheduler.kv_tiers
    scheduler.add_request(make_request("a", PREFIX[:12] + [7], max_tokens=1))
    _run_all(scheduler, runner)
    assert tiers.cpu.num_cached_blocks == 0 and scheduler.kv_cache_manager.block_pool.num_cached_blocks == 3
    # free queue [3, 2, 1, 0] (a freed tail first): b's 2 blocks take 3 (uncached), then 2 (a's 3rd)
    scheduler.add_request(make_request("b", list(range(300, 308)), max_tokens=1))
    moves = []
    while scheduler.has_unfinished_requests():
        moves += step(scheduler, runner)[0].transfers.moves
    assert [(m.req_id, m.src_tier, m.src_block_id, m.dst_tier, m.dst_block_id) for m in moves] == [
        (None, GPU, 2, CPU, 0)
    ]
    assert tiers.num_demoted == 1 and tiers.cpu.cached_free_block_ids() == [0]
    scheduler.add_request(make_request("c", PREFIX[:12] + [9], max_tokens=1))
    batch, updates = step(scheduler, runner)
    (new_c,) = batch.new_reqs
    assert list(zip(new_c.block_tiers, new_c.block_ids, strict=True))[:3] == [(GPU, 0), (GPU, 1), (CPU, 0)]
    assert updates["c"].num_cached_tokens == 12
    _run_all(scheduler, runner)


def test_no_demotion_when_a_cold_tier_has_the_block_or_the_cpu_tier_has_no_room():
    # a's full blocks: 1-3 in the cpu tier's cache, 0 (a sink), 4 and 5 on the gpu
    scheduler, runner = _finish_prefix_request()
    tiers = scheduler.kv_tiers
    scheduler.add_request(make_request("b", list(range(300, 316)), max_tokens=1))
    _run_all(scheduler, runner)
    assert tiers.num_demoted == 3  # blocks 0, 4 and 5, as b's allocations reuse them
    # now all of a's full blocks are in the cpu tier's cache (4 blocks: LRU kept the newest 4)
    hashes = make_request("a2", PREFIX + [7], max_tokens=1).block_hashes[:6]
    assert sum(tiers.cpu.lookup(h) is not None for h in hashes) == 4
    full = replace(SMALL, num_cpu_blocks=0)  # no cpu tier: nothing is demoted (disk is too slow)
    scheduler, runner = _finish_prefix_request(full)
    scheduler.add_request(make_request("b", list(range(300, 316)), max_tokens=1))
    _run_all(scheduler, runner)
    assert scheduler.kv_tiers.num_demoted == 0


def test_a_running_requests_spilled_blocks_are_cold_hits_for_a_request_arriving_meanwhile():
    scheduler, runner = Scheduler(SMALL), TierRunner()
    scheduler.add_request(make_request("a", PREFIX + [7], max_tokens=12))
    for _ in range(7):  # a's 25-token prompt, 4 tokens a step: its old blocks spill as it goes
        step(scheduler, runner)
    a_table = table(scheduler, "a")
    assert a_table[1:4] == [(CPU, 0), (CPU, 1), (CPU, 2)]
    scheduler.add_request(make_request("b", PREFIX + [8], max_tokens=2))
    batch, updates = step(scheduler, runner)
    # b shares a's spilled blocks in place (cached as they spilled), not recomputed from block 1
    assert batch.num_scheduled_tokens["b"] == 1 and updates["b"].num_cached_tokens == 24
    assert table(scheduler, "b")[1:4] == a_table[1:4]
    tiers = scheduler.kv_tiers
    assert [tiers.cpu.ref_cnt(i) for i in range(3)] == [2, 2, 2]
    _run_all(scheduler, runner)
    assert tiers.cpu.num_used_blocks == 0


def test_a_wave_on_one_prefix_is_admitted_at_once_when_the_gpu_tier_is_full_of_it():
    """The gpu tier (8 blocks) holds a's whole prompt, its 6 prefix blocks shared with b: b's
    hits below both hot windows leave the gpu for both (one copy each) and b takes them as cold
    hits, instead of waiting for a to finish (it used to: its hits were the only spill candidates
    and were excluded)."""
    scheduler, runner = Scheduler(CONFIG), TierRunner()
    scheduler.add_request(make_request("a", PREFIX + [7] * 5, max_tokens=8))
    batch, _ = step(scheduler, runner)
    assert scheduler.kv_cache_manager.num_free_blocks == 0
    scheduler.add_request(make_request("b", PREFIX + [8] * 5, max_tokens=8))
    batch, updates = step(scheduler, runner)  # the fake runner checks every token of a and b
    assert [n.req_id for n in batch.new_reqs] == ["b"] and batch.num_scheduled_tokens == {"a": 1, "b": 5}
    # eligible for b (24 computed, hot window 8, 1 sink): 1..3; for a (29 computed): 1..4
    assert [(m.req_id, m.logical_idx, m.dst_tier) for m in batch.transfers.moves] == [
        ("a", 1, CPU),
        ("a", 2, CPU),
    ]
    assert table(scheduler, "b")[:6] == [(GPU, 0), (CPU, 0), (CPU, 1), (GPU, 3), (GPU, 4), (GPU, 5)]
    assert table(scheduler, "a")[1:3] == [(CPU, 0), (CPU, 1)]
    assert updates["b"].num_cached_tokens == 24
    assert scheduler.stats().kv_tiers.prefix_hit_tokens["cpu"] == 8
    hashes = scheduler.requests["b"].block_hashes
    _run_all(scheduler, runner)
    tiers = scheduler.kv_tiers
    assert tiers.cpu.num_used_blocks == 0 and [tiers.cpu.lookup(h) for h in hashes[1:3]] == [0, 1]


def test_a_shared_prefix_block_spills_once_for_all_its_holders() -> None:
    scheduler = Scheduler(replace(CONFIG, hot_window_tokens=0, num_sink_blocks=0))
    runner = TierRunner()
    prefix = list(range(8))
    scheduler.add_request(make_request("a", prefix + [50]))
    step(scheduler, runner)
    scheduler.add_request(make_request("b", prefix + [60] + list(range(300, 319))))  # 28 tokens
    batch, _ = step(scheduler, runner)
    assert batch.new_reqs[0].block_ids[:2] == [0, 1]  # shared with a
    scheduler.add_request(make_request("c", range(200, 208)))
    batch, _ = step(scheduler, runner)  # the fake runner checks every token of a, b and c
    # b's token 28 needs a block, c needs 2. Blocks 0 and 1, shared by a and b, are below both
    # hot windows (a has computed 10 tokens): each leaves once, one move per holder.
    assert batch.transfers.moves == [
        move("a", 0, (GPU, 0), (CPU, 0)), move("b", 0, (GPU, 0), (CPU, 0)),
        move("a", 1, (GPU, 1), (CPU, 1)), move("b", 1, (GPU, 1), (CPU, 1)),
        move("b", 2, (GPU, 3), (CPU, 2)),
    ]  # fmt: skip
    tiers = scheduler.kv_tiers
    assert [tiers.cpu.ref_cnt(i) for i in range(3)] == [2, 2, 1]
    assert table(scheduler, "a")[:2] == table(scheduler, "b")[:2] == [(CPU, 0), (CPU, 1)]
    # findable at once by their prefix hashes (b's block 2 too)
    hashes = scheduler.requests["b"].block_hashes
    assert [tiers.cpu.lookup(h) for h in hashes[:3]] == [0, 1, 2]
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)
    assert_all_free(scheduler)


def test_group_moves_copies_a_shared_blocks_bytes_once() -> None:
    moves = [
        move("a", 0, (GPU, 0), (CPU, 0)), move("b", 0, (GPU, 0), (CPU, 0)),
        move("a", 1, (GPU, 1), (CPU, 1)), move(None, 1, (GPU, 1), (CPU, 1)),
        move("c", 5, (GPU, 2), (CPU, 2)),
    ]  # fmt: skip
    assert group_moves(moves) == [CopyRun(GPU, 0, CPU, 0, 3)]
