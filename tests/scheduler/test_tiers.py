"""KV tiers on the scheduler side: 8 gpu blocks of 4 tokens, small cpu and disk tiers, exact ids.

`TierRunner` is a fake runner that models the bytes: every (tier, block id) slot holds the
(position, token) pairs written into it, moves copy slots, and before each forward it checks
the `TransferPlan` invariants and that every computed token of every scheduled request is
found where its block table says. A random schedule drives it for hundreds of steps.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.request import Request, RequestStatus
from kvspill.scheduler.scheduler import Scheduler
from kvspill.stats import RequestTierStats
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, BlockMove, RequestUpdate, ScheduledBatch, StepOutput

BLOCK_SIZE = 4
GPU, CPU, DISK = TIER_GPU, TIER_CPU, TIER_DISK

CONFIG = SchedulerConfig(
    max_num_seqs=4,
    max_num_batched_tokens=32,
    max_model_len=128,
    block_size=BLOCK_SIZE,
    num_blocks=8,
    enable_prefix_caching=True,
    num_cpu_blocks=8,
    num_disk_blocks=8,
    num_sink_blocks=1,
    hot_window_tokens=8,
)

Slot = tuple[int, int]  # (tier, block id)


def make_request(req_id: str, prompt: Sequence[int], max_model_len: int = 128, **params: object) -> Request:
    params.setdefault("max_tokens", 16)
    sampling_params = SamplingParams(**params)  # type: ignore[arg-type]
    return Request(req_id, prompt, sampling_params, frozenset(), 0.0, max_model_len, BLOCK_SIZE)


def move(req_id: str | None, idx: int, src: Slot, dst: Slot) -> BlockMove:
    return BlockMove(req_id, idx, src[0], src[1], dst[0], dst[1])


@dataclass
class _State:
    token_ids: list[int]
    num_computed_tokens: int
    table: list[Slot]


@dataclass
class TierRunner:
    """The runner's view of requests and of the bytes in every tier; asserts the contract."""

    block_size: int = BLOCK_SIZE
    state: dict[str, _State] = field(default_factory=dict)
    # The bytes: (tier, block id) -> offset in the block -> (position, token) written there.
    slots: dict[Slot, dict[int, tuple[int, int]]] = field(default_factory=dict)

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        for req_id in batch.finished_req_ids:
            self.state.pop(req_id, None)
        for new in batch.new_reqs:
            assert new.req_id not in self.state
            tiers = new.block_tiers or [GPU] * len(new.block_ids)
            assert len(tiers) == len(new.block_ids)
            if new.block_tiers:
                assert any(t != GPU for t in tiers), "block_tiers is empty when every block is gpu"
            token_ids = list(new.prompt_token_ids) + list(new.output_token_ids)
            block_table = list(zip(tiers, new.block_ids, strict=True))
            self.state[new.req_id] = _State(token_ids, new.num_computed_tokens, block_table)
        for cached in batch.cached_reqs:
            st = self.state[cached.req_id]
            assert st.num_computed_tokens == cached.num_computed_tokens
            st.table.extend((GPU, block_id) for block_id in cached.new_block_ids)
        for m in batch.transfers.moves:
            self._move(m)
        self._check(batch)
        return self._forward(batch)

    def _move(self, m: BlockMove) -> None:
        src, dst = (m.src_tier, m.src_block_id), (m.dst_tier, m.dst_block_id)
        assert src[0] != dst[0]
        content = dict(self.slots.get(src, {}))
        if dst[0] != GPU:
            assert len(content) == self.block_size, f"a cold block must be full: {m}"
        self.slots[dst] = content
        if m.req_id is not None:
            st = self.state[m.req_id]
            assert st.table[m.logical_idx] == src, m
            st.table[m.logical_idx] = dst

    def _check(self, batch: ScheduledBatch) -> None:
        cold_idx: dict[Slot, int] = {}  # a cold block shared by prefix hits: the same logical index
        for req_id, st in self.state.items():
            for idx, slot in enumerate(st.table):
                if slot[0] != GPU:
                    assert cold_idx.setdefault(slot, idx) == idx, f"{slot} shared at two indices"
                    assert (idx + 1) * self.block_size <= st.num_computed_tokens
            for pos in range(st.num_computed_tokens):  # every computed token is where the table says
                slot = st.table[pos // self.block_size]
                got = self.slots.get(slot, {}).get(pos % self.block_size)
                assert got == (pos, st.token_ids[pos]), (req_id, pos, slot, got)
        for req_id, n in batch.num_scheduled_tokens.items():
            st = self.state[req_id]
            for pos in range(st.num_computed_tokens, st.num_computed_tokens + n):
                assert st.table[pos // self.block_size][0] == GPU, (req_id, pos, "written blocks are gpu")

    def _forward(self, batch: ScheduledBatch) -> StepOutput:
        sampled: dict[str, list[int]] = {}
        for req_id, n in batch.num_scheduled_tokens.items():
            st = self.state[req_id]
            for pos in range(st.num_computed_tokens, st.num_computed_tokens + n):
                slot = st.table[pos // self.block_size]
                self.slots.setdefault(slot, {})[pos % self.block_size] = (pos, st.token_ids[pos])
            st.num_computed_tokens += n
            sampled[req_id] = []
            if st.num_computed_tokens == len(st.token_ids):
                token = (pos * 31 + len(req_id)) % 50 + 10  # deterministic, varied
                st.token_ids.append(token)
                sampled[req_id] = [token]
        return StepOutput(sampled_token_ids=sampled)


def step(scheduler: Scheduler, runner: TierRunner) -> tuple[ScheduledBatch, dict[str, RequestUpdate]]:
    batch = scheduler.schedule()
    updates = scheduler.update_from_output(batch, runner.execute(batch))
    return batch, {u.req_id: u for u in updates}


def table(scheduler: Scheduler, req_id: str) -> list[Slot]:
    request = scheduler.get_request(req_id)
    assert request is not None
    ids, tiers = scheduler.kv_tiers.get_block_table(request)
    return list(zip(tiers or [GPU] * len(ids), ids, strict=True))


def assert_all_free(scheduler: Scheduler) -> None:
    kv, tiers = scheduler.kv_cache_manager, scheduler.kv_tiers
    assert kv.num_free_blocks == kv.num_blocks
    assert all(block.ref_cnt == 0 for block in kv.block_pool.blocks)
    assert sorted(tiers.cpu.free_block_ids()) == list(range(tiers.cpu.num_blocks))
    assert sorted(tiers.disk.free_block_ids()) == list(range(tiers.disk.num_blocks))
    assert not tiers._cold and not tiers._requests and not tiers._parked
    tier = scheduler.stats().kv_tiers
    assert (tier.num_used_gpu_blocks, tier.num_used_cpu_blocks, tier.num_used_disk_blocks) == (0, 0, 0)


# ---- config ------------------------------------------------------------------------------


def test_config_defaults_and_validation() -> None:
    plain = SchedulerConfig(
        max_num_seqs=1, max_num_batched_tokens=8, max_model_len=64, block_size=4, num_blocks=8
    )
    tier_fields = (
        plain.num_cpu_blocks,
        plain.num_disk_blocks,
        plain.num_sink_blocks,
        plain.hot_window_tokens,
    )
    assert tier_fields == (0, 0, 1, 1024) and not Scheduler(plain).kv_tiers.enabled
    with pytest.raises(InvalidParameterError, match="num_cpu_blocks"):
        replace(CONFIG, num_cpu_blocks=-1)
    with pytest.raises(InvalidParameterError, match="hot_window_tokens"):
        replace(CONFIG, hot_window_tokens=-1)


# ---- spilling ----------------------------------------------------------------------------


def test_a_request_growing_past_the_gpu_spills_its_oldest_eligible_blocks() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_batched_tokens=16))
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(40), max_tokens=30))
    batch, _ = step(scheduler, runner)
    assert batch.new_reqs[0].block_ids == [0, 1, 2, 3] and batch.transfers.empty
    batch, _ = step(scheduler, runner)
    assert batch.cached_reqs[0].new_block_ids == [4, 5, 6, 7] and batch.transfers.empty
    # Tokens 32..39 need blocks 8 and 9; the pool is full. Block 0 is the sink and blocks 6, 7
    # hold the last 8 computed tokens: 1..5 are eligible, the oldest two go, in order.
    batch, _ = step(scheduler, runner)
    assert batch.transfers.moves == [move("a", 1, (GPU, 1), (CPU, 0)), move("a", 2, (GPU, 2), (CPU, 1))]
    assert batch.cached_reqs[0].new_block_ids == [1, 2]  # the freed ids, used in the same step
    batch, _ = step(scheduler, runner)  # token 40 opens block 10
    assert batch.transfers.moves == [move("a", 3, (GPU, 3), (CPU, 2))]
    assert table(scheduler, "a") == [
        (GPU, 0), (CPU, 0), (CPU, 1), (CPU, 2), (GPU, 4), (GPU, 5), (GPU, 6), (GPU, 7), (GPU, 1), (GPU, 2), (GPU, 3)
    ]  # fmt: skip
    for _ in range(29):  # to the end: the sink and the window never leave the gpu
        step(scheduler, runner)
        request = scheduler.get_request("a")
        if request is not None:
            _check_placement(scheduler, request)
            assert table(scheduler, "a")[0] == (GPU, 0)
    assert scheduler.get_request("a") is None
    assert_all_free(scheduler)


def test_two_requests_spill_by_block_index_then_arrival() -> None:
    scheduler = Scheduler(replace(CONFIG, hot_window_tokens=0))
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(12)))
    scheduler.add_request(make_request("b", range(100, 112)))
    batch, _ = step(scheduler, runner)
    assert [n.block_ids for n in batch.new_reqs] == [[0, 1, 2], [3, 4, 5]]
    scheduler.add_request(make_request("c", range(200, 212)))
    batch, _ = step(scheduler, runner)  # a, b decode into 6, 7; c needs 3 blocks: 3 spills
    assert [(c.req_id, c.new_block_ids) for c in batch.cached_reqs] == [("a", [6]), ("b", [7])]
    assert batch.transfers.moves == [
        move("a", 1, (GPU, 1), (CPU, 0)),  # index 1 of a, then index 1 of b (arrived later),
        move("b", 1, (GPU, 4), (CPU, 1)),
        move("a", 2, (GPU, 2), (CPU, 2)),  # then index 2 of a
    ]
    (new_c,) = batch.new_reqs
    assert new_c.block_ids == [1, 4, 2] and new_c.block_tiers == []  # all gpu
    window = {"hot_window_tokens": 0, "num_sink_blocks": 1}  # the scheduler's: none asked its own
    assert scheduler.tier_stats() == {
        "a": RequestTierStats("running", num_gpu_blocks=2, num_cpu_blocks=2, num_disk_blocks=0, **window),
        "b": RequestTierStats("running", num_gpu_blocks=3, num_cpu_blocks=1, num_disk_blocks=0, **window),
        "c": RequestTierStats("running", num_gpu_blocks=3, num_cpu_blocks=0, num_disk_blocks=0, **window),
    }


def test_a_full_cpu_tier_pushes_its_oldest_block_to_disk() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_batched_tokens=16, num_cpu_blocks=2, hot_window_tokens=0))
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(32), max_tokens=20))
    moves = [step(scheduler, runner)[0].transfers.moves for _ in range(11)]
    assert moves[2] == [move("a", 1, (GPU, 1), (CPU, 0))]  # token 32 opens block 8
    assert moves[6] == [move("a", 2, (GPU, 2), (CPU, 1))]  # token 36: the cpu tier is now full
    assert moves[10] == [move("a", 1, (CPU, 0), (DISK, 0)), move("a", 3, (GPU, 3), (CPU, 0))]
    assert sum(map(len, moves)) == 4
    stats = scheduler.stats().kv_tiers
    moved = {"gpu->cpu": 3, "cpu->disk": 1, "gpu->disk": 0, "cpu->gpu": 0, "disk->gpu": 0}
    assert stats.kv_block_moves == moved
    used = (stats.num_used_gpu_blocks, stats.num_used_cpu_blocks, stats.num_used_disk_blocks)
    assert used == (8, 2, 1)
    assert (stats.num_gpu_blocks, stats.num_cpu_blocks, stats.num_disk_blocks) == (8, 2, 8)


def test_without_a_cpu_tier_blocks_spill_to_disk() -> None:
    scheduler = Scheduler(replace(CONFIG, max_num_batched_tokens=16, num_cpu_blocks=0, hot_window_tokens=0))
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(32), max_tokens=20))
    moves = [step(scheduler, runner)[0].transfers.moves for _ in range(3)]
    assert moves[2] == [move("a", 1, (GPU, 1), (DISK, 0))]


# ---- preemption --------------------------------------------------------------------------


def _preemption_scenario(num_cpu_blocks: int) -> tuple[Scheduler, TierRunner, ScheduledBatch]:
    """a (36-token prompt, 16 tokens a step) needs 4 blocks while only 3 can spill: b is preempted."""
    config = replace(
        CONFIG, long_prefill_token_threshold=16, num_cpu_blocks=num_cpu_blocks, num_disk_blocks=0
    )
    scheduler = Scheduler(replace(config, hot_window_tokens=4))
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(36), max_tokens=1))
    scheduler.add_request(make_request("b", range(100, 113), max_tokens=4))
    batch, _ = step(scheduler, runner)
    assert [n.block_ids for n in batch.new_reqs] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    batch, _ = step(scheduler, runner)
    assert batch.finished_req_ids == {"b"} and batch.num_scheduled_tokens == {"a": 16}
    return scheduler, runner, batch


def test_preemption_parks_the_kv_in_the_cold_tiers_when_there_is_room() -> None:
    scheduler, runner, batch = _preemption_scenario(num_cpu_blocks=8)
    b = scheduler.get_request("b")
    assert b is not None and b.status == RequestStatus.PREEMPTED
    assert b.num_computed_tokens == 12  # 13 computed: the partial block 3 cannot go cold
    assert batch.transfers.moves == [  # bytes only: the runner dropped b
        move(None, 0, (GPU, 4), (CPU, 0)),
        move(None, 1, (GPU, 5), (CPU, 1)),
        move(None, 2, (GPU, 6), (CPU, 2)),
    ]
    assert batch.cached_reqs[0].new_block_ids == [7, 4, 5, 6]  # b's partial block, then the spilled ones
    parked = RequestTierStats("preempted", num_gpu_blocks=0, num_cpu_blocks=3, num_disk_blocks=0)
    assert scheduler.tier_stats()["b"] == replace(parked, hot_window_tokens=4, num_sink_blocks=1)

    batch, _ = step(scheduler, runner)  # a's last 4 tokens spill a1; b resumes and spills a2..a4
    (new_b,) = batch.new_reqs
    assert new_b.num_computed_tokens == 12 and len(new_b.output_token_ids) == 1
    assert new_b.block_ids == [2, 1, 3, 7] and new_b.block_tiers == [GPU, CPU, GPU, GPU]
    assert batch.transfers.moves[-2:] == [  # its sink and its window block come back, block 1 stays cold
        move(None, 0, (CPU, 0), (GPU, 2)),
        move(None, 2, (CPU, 2), (GPU, 3)),
    ]
    spilled = [(m.req_id, m.logical_idx) for m in batch.transfers.moves[:-2]]
    assert spilled == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert batch.num_scheduled_tokens == {"a": 4, "b": 2}
    stats = scheduler.stats()
    assert (stats.num_preemptions, stats.kv_tiers.num_spilled_preemptions) == (1, 1)
    assert stats.kv_tiers.kv_block_moves["cpu->gpu"] == 2
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)
    assert_all_free(scheduler)


def test_preemption_recomputes_when_the_cold_tiers_have_no_room() -> None:
    scheduler, runner, batch = _preemption_scenario(num_cpu_blocks=2)  # b has 3 full blocks
    b = scheduler.get_request("b")
    assert b is not None and b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert scheduler.stats().kv_tiers.num_spilled_preemptions == 0
    # a takes b's freed blocks 6, 5, 4 (b's logical 2, 1, 0): each is first demoted to the cpu
    # tier's prefix cache; with 2 cpu blocks the third copy reuses the first (LRU): the prefix
    # start survives.
    assert batch.transfers.moves == [
        move(None, -1, (GPU, 6), (CPU, 0)),
        move(None, -1, (GPU, 5), (CPU, 1)),
        move(None, -1, (GPU, 4), (CPU, 0)),
    ]
    new_reqs = []
    while scheduler.has_unfinished_requests():
        new_reqs += step(scheduler, runner)[0].new_reqs
    (new_b,) = new_reqs  # b starts over from its demoted block 0 (a's spills took cpu 1 meanwhile)
    assert new_b.num_computed_tokens == 4 and new_b.block_tiers[:2] == [CPU, GPU]
    assert len(new_b.output_token_ids) == 1
    assert_all_free(scheduler)


def test_parked_kv_is_dropped_when_an_earlier_request_needs_the_room() -> None:
    """Without this, a would preempt itself forever while b's parked KV holds the cpu tier."""
    config = replace(CONFIG, max_num_batched_tokens=16, num_blocks=4, num_cpu_blocks=4, num_disk_blocks=0)
    scheduler = Scheduler(replace(config, enable_prefix_caching=False, num_sink_blocks=0))
    runner = TierRunner()
    scheduler.add_request(make_request("a", range(4), max_tokens=19))
    scheduler.add_request(make_request("b", range(100, 116), max_tokens=2))
    step(scheduler, runner)  # a: block 0; b: 12 tokens in 1, 2, 3
    batch, _ = step(scheduler, runner)  # a spills b's block 0; b needs a block, preempts itself, parks
    assert batch.finished_req_ids == {"b"} and batch.transfers.moves == [
        move(None, 0, (GPU, 1), (CPU, 0)),
        move(None, 1, (GPU, 2), (CPU, 1)),
        move(None, 2, (GPU, 3), (CPU, 2)),
    ]
    b = scheduler.get_request("b")
    assert b is not None and scheduler.kv_tiers.is_parked(b) and b.num_computed_tokens == 12
    moves = [step(scheduler, runner)[0].transfers.moves for _ in range(16)]
    assert moves[11] == [move("a", 0, (GPU, 0), (CPU, 3))]  # the last free cpu block
    assert moves[15] == [move("a", 1, (GPU, 1), (CPU, 0))]  # b's KV was dropped for it
    assert not scheduler.kv_tiers.is_parked(b) and scheduler.stats().kv_tiers.num_dropped_spills == 1
    while scheduler.has_unfinished_requests():
        batch, _ = step(scheduler, runner)
        if batch.new_reqs:
            assert batch.new_reqs[0].req_id == "b" and batch.new_reqs[0].num_computed_tokens == 0
    assert b.finish_reason == "length" and b.num_output_tokens == 2
    assert_all_free(scheduler)


# ---- fitting and freeing -----------------------------------------------------------------


def test_a_request_larger_than_the_gpu_tier_runs_and_frees_every_tier() -> None:
    scheduler = Scheduler(replace(CONFIG, num_cpu_blocks=2, hot_window_tokens=4))
    runner = TierRunner()
    request = make_request("a", range(60), max_tokens=8)  # 17 blocks: 8 gpu + 2 cpu + 7 disk
    scheduler.add_request(request)
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)
        if scheduler.get_request("a") is not None:
            used = scheduler.stats().kv_tiers
    assert request.finish_reason == "length" and request.num_tokens == 68
    assert (used.num_used_cpu_blocks, used.num_used_disk_blocks) == (2, 7)
    assert_all_free(scheduler)


def test_requests_that_can_never_fit_fail_with_advice() -> None:
    scheduler = Scheduler(replace(CONFIG, num_cpu_blocks=2, num_disk_blocks=2))
    scheduler.add_request(make_request("big", range(50)))  # 13 blocks > 8 + 2 + 2
    _, updates = step(scheduler, TierRunner())
    assert "gpu, cpu and disk tiers hold 8 + 2 + 2 blocks" in (updates["big"].error or "")
    scheduler = Scheduler(replace(CONFIG, hot_window_tokens=64))  # the window alone needs 16 blocks
    runner = TierRunner()
    scheduler.add_request(make_request("long", range(40), max_tokens=4))
    updates = {}
    while scheduler.has_unfinished_requests():
        updates.update(step(scheduler, runner)[1])
    assert "--hot-window-tokens" in (updates["long"].error or "")
    assert_all_free(scheduler)


def test_abort_of_a_parked_request_frees_its_cold_blocks() -> None:
    scheduler, runner, _ = _preemption_scenario(num_cpu_blocks=8)
    assert scheduler.stats().kv_tiers.num_used_cpu_blocks == 3
    scheduler.abort_requests("b")
    assert scheduler.stats().kv_tiers.num_used_cpu_blocks == 0
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)
    assert_all_free(scheduler)


# ---- random schedules: the TransferPlan invariants and the books balance -------------------


def _random_config(rng: random.Random) -> SchedulerConfig:
    return replace(
        CONFIG,
        max_num_seqs=rng.randint(1, 4),
        max_num_batched_tokens=rng.choice([4, 6, 8, 16, 32]),
        long_prefill_token_threshold=rng.choice([0, 0, 5]),
        num_blocks=rng.randint(6, 10),
        enable_prefix_caching=rng.random() < 0.7,
        num_cpu_blocks=rng.choice([0, 2, 4, 8]),
        num_disk_blocks=rng.choice([0, 3, 8]),
        num_sink_blocks=rng.randint(0, 2),
        hot_window_tokens=rng.choice([0, 1, 4, 6, 8]),
    )


# 243: a re-admitted request's cold prefix hit matched its stale cpu-order entry (a crash)
@pytest.mark.parametrize("seed", [*range(40), 243])
def test_random_schedules_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    config = _random_config(rng)
    scheduler = Scheduler(config)
    runner = TierRunner()
    prefixes = [list(range(100, 112)), list(range(200, 208))]
    num_requests = 12
    for i in range(400):
        if i < 150 and rng.random() < 0.15 and num_requests > 0:
            num_requests -= 1
            tail = [rng.randint(1, 9) for _ in range(rng.randint(1, 40))]
            prompt = rng.choice(prefixes)[: rng.randint(0, 12)] + tail  # shared prefixes: ref_cnt > 1
            scheduler.add_request(make_request(f"r{i}", prompt, max_tokens=rng.randint(1, 24)))
        if rng.random() < 0.02 and scheduler.requests:
            scheduler.abort_requests(rng.choice(sorted(scheduler.requests)))
        step(scheduler, runner)
        _check_books(scheduler)
        if num_requests == 0 and not scheduler.has_unfinished_requests():
            break
    assert not scheduler.has_unfinished_requests(), f"stuck: {scheduler.requests}"
    step(scheduler, runner)  # the runner drops the last finished requests
    assert not runner.state
    assert_all_free(scheduler)
    if not scheduler.kv_tiers.enabled:
        assert sum(scheduler.stats().kv_tiers.kv_block_moves.values()) == 0


def _check_books(scheduler: Scheduler) -> None:
    """Block counts per tier add up: what requests hold plus what is free is the whole tier."""
    tiers = scheduler.kv_tiers
    per_request = scheduler.tier_stats()
    assert set(per_request) == set(tiers._requests)
    stats = scheduler.stats().kv_tiers
    # cold blocks may be shared (prefix hits in the cold tiers): count distinct ids
    cold = {slot for r in tiers._requests for slot in tiers._cold.get(r, {}).values()}
    assert stats.num_used_cpu_blocks == sum(tier == CPU for tier, _ in cold)
    assert stats.num_used_disk_blocks == sum(tier == DISK for tier, _ in cold)
    # gpu blocks may be shared (prefix hits): count distinct ids
    gpu_ids = {b.block_id for r in tiers._requests for b in scheduler.kv_cache_manager.get_blocks(r) if b}
    assert stats.num_used_gpu_blocks == len(gpu_ids)
    for req_id, s in per_request.items():
        request = scheduler.get_request(req_id)
        assert request is not None
        assert s.status == ("running" if request.status == RequestStatus.RUNNING else "preempted")
        if s.status == "preempted":
            assert s.num_gpu_blocks == 0 and request.num_computed_tokens % BLOCK_SIZE == 0
            continue
        _check_placement(scheduler, request)


def _check_placement(scheduler: Scheduler, request: Request) -> None:
    """Sinks and the blocks of the last `hot_window_tokens` computed tokens are on the gpu, except
    prefix hits found in a cold tier (attended where they are)."""
    config, c, tiers = scheduler.config, request.num_computed_tokens, scheduler.kv_tiers
    for idx, (tier, block_id) in enumerate(table(scheduler, request.req_id)):
        hot = idx < config.num_sink_blocks or (idx + 1) * BLOCK_SIZE > c - config.hot_window_tokens
        is_hit = tier != GPU and tiers._pool(tier).is_cached(block_id)
        assert tier == GPU or not hot or is_hit, (request.req_id, idx, c)
