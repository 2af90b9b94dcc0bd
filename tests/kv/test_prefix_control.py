"""Cache management by prefix on the scheduler's tiers (kv/prefix_control.py): exact block ids.

8 gpu, 8 cpu and 8 disk blocks of 4 tokens (tests/scheduler/test_tiers.py's CONFIG). The fake
runner there holds every tier's bytes and checks that each computed token is where the block
table says, so a moved prefix that serves the next request proves the move carried its bytes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.kv.prefix_control import PrefixControl
from kvspill.prefix_records import KVConflictError, UnknownPrefixError
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.scheduler import Scheduler
from tests.scheduler.test_tiers import CONFIG, CPU, DISK, GPU, TierRunner, make_request, step

PREFIX = list(range(100, 140))  # 10 full blocks
OTHER = list(range(300, 340))


def _finish(scheduler: Scheduler, runner: TierRunner, req_id: str, prompt: list[int]) -> None:
    scheduler.add_request(make_request(req_id, prompt, max_tokens=1))
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)


def _setup(
    config: SchedulerConfig = CONFIG, pin_share: float = 0.5
) -> tuple[Scheduler, TierRunner, PrefixControl]:
    scheduler, runner = Scheduler(config), TierRunner()
    _finish(scheduler, runner, "a", PREFIX + [7])
    return scheduler, runner, PrefixControl(scheduler.kv_tiers, pin_share)


def _run_moves(scheduler: Scheduler, runner: TierRunner) -> None:
    """What the engine does after an operation: the recorded moves run at once."""
    runner.execute(scheduler.schedule_moves_only())


def _where(control: PrefixControl, prefix_id: str) -> list[tuple[int, int]]:
    entry = control.index.get(prefix_id)
    assert entry is not None
    return [(b.tier, b.block_id) for b in control.chain(entry.hashes)]


def _only_prefix(control: PrefixControl) -> str:
    (row,) = control.prefixes()
    return row.prefix_id


# The finished request's chain: block 0 (a sink) on the gpu, blocks 1-3 spilled to cpu 0-2,
# the rest on the gpu where the request last had them.
START = [(GPU, 0), (CPU, 0), (CPU, 1), (CPU, 2), (GPU, 4), (GPU, 5), (GPU, 6), (GPU, 7), (GPU, 1), (GPU, 2)]


def test_a_finished_request_is_listed_as_one_prefix_with_its_blocks_per_tier() -> None:
    scheduler, _, control = _setup()
    (row,) = control.prefixes()
    assert _where(control, row.prefix_id) == START
    assert row.to_json(with_block_ids=True)["block_ids"] == {
        "gpu": [0, 4, 5, 6, 7, 1, 2],
        "cpu": [0, 1, 2],
        "disk": [],
    }
    assert (row.num_tokens, row.num_cached_tokens, row.hits, row.pinned) == (40, 40, 0, None)
    assert row.prefix_id == f"{scheduler.kv_tiers.prefixes.get(row.prefix_id).hashes[-1]:016x}"  # type: ignore[union-attr]


def test_lookup_counts_leading_tokens_per_tier_and_names_the_prefix() -> None:
    scheduler, _, control = _setup()
    request = make_request("q", PREFIX + [1, 2, 3, 4, 5])
    request.bind_block_size(4, scheduler.config.prefix_hash_seed)
    result = control.lookup(request.num_tokens, request.block_hashes)
    assert result.to_json() == {
        "prompt_tokens": 45, "cached_tokens": 40, "tiers": {"gpu": 28, "cpu": 12, "disk": 0},
        "persisted_tokens": None, "prefix": _only_prefix(control),
    }  # fmt: skip


BIG = replace(CONFIG, num_cpu_blocks=16, num_disk_blocks=16)


def test_move_to_disk_cpu_then_gpu_exact_ids_and_the_next_request_reads_the_moved_bytes() -> None:
    scheduler, runner, control = _setup(BIG)
    prefix_id = _only_prefix(control)
    assert control.move(prefix_id, "disk").num_blocks == 10
    _run_moves(scheduler, runner)
    assert _where(control, prefix_id) == [(DISK, i) for i in range(10)]
    assert scheduler.kv_tiers.cpu.num_cached_blocks == 0  # the sources left their tiers
    assert scheduler.kv_cache_manager.block_pool.num_cached_blocks == 0
    assert control.move(prefix_id, "cpu").num_blocks == 10
    _run_moves(scheduler, runner)
    assert _where(control, prefix_id) == [(CPU, i) for i in range(10)]
    with pytest.raises(KVConflictError, match=r"needs 10 free blocks \(40 tokens\), but the gpu tier has 8"):
        control.move(prefix_id, "gpu")
    assert _where(control, prefix_id) == [(CPU, i) for i in range(10)]  # a refused move changes nothing
    assert control.move(prefix_id, "gpu", partial=True).num_blocks == 8
    _run_moves(scheduler, runner)
    gpu_ids = [3, 0, 4, 5, 6, 7, 1, 2]  # the free queue's order after the first request
    assert _where(control, prefix_id) == [(GPU, i) for i in gpu_ids] + [(CPU, 8), (CPU, 9)]
    # the next request takes the moved blocks as hits; the fake runner checks their bytes
    scheduler.add_request(make_request("b", PREFIX + [8, 9], max_tokens=2))
    batch, _ = step(scheduler, runner)
    (new_b,) = batch.new_reqs
    assert new_b.num_computed_tokens == 28  # gpu hits stop at num_gpu_blocks - 1
    assert new_b.block_ids == gpu_ids and new_b.block_tiers == []
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)
    assert control.prefixes()[0].hits == 1


@pytest.mark.parametrize("pinned", [True, False])
def test_a_pinned_prefix_survives_pressure_that_evicts_the_others(pinned: bool) -> None:
    scheduler, runner, control = _setup(BIG, pin_share=1.0)
    prefix_id = _only_prefix(control)
    if pinned:
        result = control.pin(prefix_id, "cpu")
        _run_moves(scheduler, runner)
        assert (result.num_blocks, result.tier) == (10, "cpu")
    before = _where(control, prefix_id)
    assert before == ([(CPU, i) for i in (3, 0, 1, 2, 4, 5, 6, 7, 8, 9)] if pinned else START)
    for i in range(4):
        _finish(scheduler, runner, f"o{i}", [x + 100 * i for x in OTHER] + [1])
    if not pinned:  # evicted by the others' blocks, and no longer listed
        assert _where(control, prefix_id) == [] and prefix_id not in [r.prefix_id for r in control.prefixes()]
        return
    assert _where(control, prefix_id) == before  # not one pinned block moved or went
    assert [scheduler.kv_tiers.cpu.ref_cnt(i) for i in range(10)] == [1] * 10
    assert control.unpin(prefix_id, "cpu").num_blocks == 10
    assert [scheduler.kv_tiers.cpu.ref_cnt(i) for i in range(10)] == [0] * 10
    assert _where(control, prefix_id) == before  # unpinned, still cached until evicted


def test_pin_past_the_share_is_a_conflict_saying_what_is_free_and_changes_nothing() -> None:
    scheduler, _, control = _setup(BIG, pin_share=0.5)
    prefix_id = _only_prefix(control)
    message = (
        r"needs 10 blocks \(40 tokens\), but only 8 blocks \(32 tokens\) .*--kv-pin-share 0.5 of 16 blocks"
    )
    with pytest.raises(KVConflictError, match=message):
        control.pin(prefix_id, "cpu")
    assert _where(control, prefix_id) == START
    assert control.prefixes()[0].pinned is None and control.index.num_pinned(CPU) == 0


def test_a_gpu_pin_holds_its_blocks_and_is_no_room_for_other_requests() -> None:
    scheduler, runner = Scheduler(CONFIG), TierRunner()
    _finish(scheduler, runner, "a", PREFIX[:12] + [7])  # 3 full blocks, all on the gpu
    control = PrefixControl(scheduler.kv_tiers, 0.5)
    prefix_id = _only_prefix(control)
    assert _where(control, prefix_id) == [(GPU, 0), (GPU, 1), (GPU, 2)]
    assert control.pin(prefix_id, "gpu").num_blocks == 3
    pool = scheduler.kv_cache_manager.block_pool
    assert [pool.blocks[i].ref_cnt for i in range(4)] == [1, 1, 1, 0] and pool.num_free_blocks == 5
    other = make_request("x", OTHER)
    other.bind_block_size(4, scheduler.config.prefix_hash_seed)
    assert scheduler.kv_tiers.max_num_new_tokens(other, 0) == 5 * 4
    same = make_request("y", PREFIX[:12] + [1])
    same.bind_block_size(4, scheduler.config.prefix_hash_seed)
    assert scheduler.kv_tiers.max_num_new_tokens(same, 12) == 8 * 4 - 12  # its own pinned blocks count
    with pytest.raises(KVConflictError, match="pinned in the gpu tier: unpin it there first"):
        control.pin(prefix_id, "cpu")
    assert control.move(prefix_id, "cpu").num_blocks == 3  # copied: the pinned gpu blocks stay
    _run_moves(scheduler, runner)
    assert _where(control, prefix_id) == [(GPU, 0), (GPU, 1), (GPU, 2)]  # a lookup takes the gpu copy
    assert [scheduler.kv_tiers.cpu.lookup(h) for h in control.index.get(prefix_id).hashes] == [0, 1, 2]  # type: ignore[union-attr]
    assert control.prefixes()[0].pinned == "gpu" and pool.num_free_blocks == 5
    assert control.unpin(prefix_id, "gpu").num_blocks == 3 and pool.num_free_blocks == 8


def test_clear_one_prefix_then_all() -> None:
    scheduler, runner, control = _setup()
    prefix_id = _only_prefix(control)
    _finish(scheduler, runner, "o", OTHER[:8] + [1])  # 2 full blocks
    other_id = next(r.prefix_id for r in control.prefixes() if r.prefix_id != prefix_id)
    result = control.clear(prefix_id)
    assert (result.num_blocks, result.num_blocks_in_use) == (10, 0)
    assert scheduler.kv_tiers.cpu.num_cached_blocks == 0
    assert [r.prefix_id for r in control.prefixes()] == [other_id]
    with pytest.raises(UnknownPrefixError):
        control.move(prefix_id, "cpu")
    result = control.clear(None)
    assert (result.num_blocks, result.num_blocks_in_use) == (2, 0) and control.prefixes() == []
    assert scheduler.kv_cache_manager.block_pool.num_cached_blocks == 0


def test_bad_input_is_refused_before_anything_changes() -> None:
    scheduler, _, control = _setup(replace(CONFIG, num_disk_blocks=0))
    prefix_id = _only_prefix(control)
    before = _where(control, prefix_id)
    with pytest.raises(UnknownPrefixError, match="no cached prefix 'ffff'"):
        control.pin("ffff", "cpu")
    with pytest.raises(InvalidParameterError, match="no disk tier"):
        control.move(prefix_id, "disk")
    with pytest.raises(InvalidParameterError, match="tier must be one of gpu, cpu, disk"):
        control.move(prefix_id, "nvme")
    with pytest.raises(KVConflictError, match="not pinned in the cpu tier"):
        control.unpin(prefix_id, "cpu")
    with pytest.raises(InvalidParameterError, match="no --kv-persist-dir"):
        control.clear(prefix_id, persisted=True)
    assert _where(control, prefix_id) == before
    assert scheduler.kv_tiers.take_transfer_plan(()).empty
