"""KV tiers: which tier each request block lives in, and the block moves between tiers (pure Python).

The scheduler side of the tiers (vLLM's offloading "connector scheduler" in spirit): it decides and
emits a `TransferPlan`; the runner's `storage/storage.py` moves the bytes before the step's forward.

Tiers: **gpu** is the `KVCacheManager`'s `BlockPool`; **cpu** and **disk** are `ColdBlockPool`s
(`kv/cold_pool.py`), free lists handing out the lowest free id first. A request's logical block i
is in exactly one tier: a `KVBlock` in the gpu table, or `(tier, block_id)` here.

Prefix cache in every tier: each tier keeps full blocks findable by their prefix hash. A request's
cold blocks enter their tier's cache as they spill (so a request arriving meanwhile shares them)
or when it frees them (finished, or preempted without parking: its cold prefix hits, for one);
a prefix lookup walks the request's block hashes and takes, per block, the gpu copy, else the cpu
one, else the disk one. Cold hits are attended in place (the runner's cold paths take any full
cold block before the step's tokens): the request's table references the cold block, ref-counted,
and nothing is copied. A cold block in use is never evicted; cached-free ones go LRU per tier.
A cached-free gpu block the gpu tier reuses is first copied into the cpu tier's cache (demoted,
a bytes-only move in the same plan), unless a cold tier has its hash or the cpu tier has no room.

Placement, per request, with c = `num_computed_tokens` before the step, W = `hot_window_tokens`
and `num_sink_blocks` the request's own window (`KVWindow`: what it asked for, else the server's):
- hot (gpu): blocks `i < num_sink_blocks`, blocks holding any of the last W computed tokens
  `[c - W, c)`, and the blocks written this step `[c, c + num_new_tokens)`;
- eligible to spill: `i >= num_sink_blocks` and `(i + 1) * block_size <= c - W`, in the gpu tier.
  A prefix block shared by several requests must be eligible for each; it leaves for all at once
  (one copy, one cold block they all reference). A gpu prefix hit of the request being admitted
  may leave with its holders when it is eligible for that request too: it takes the cold copy as
  a cold hit (`kv/tier_spill.py`).

Rules:
- Spill order, across all requests holding gpu blocks: lowest logical index first; equal indices
  go in arrival order (`arrival_seq`). Spills are all or nothing: exactly the deficit, or none.
- Destination: the cpu tier. When it is full, its oldest block (same order) first moves on to
  disk (a cpu->disk move), then the gpu block takes its place; without a cpu tier, gpu->disk.
  So the room for spills is always `cpu free + disk free`.
- A running request's cold blocks never come back (attention reads them where they live): c only
  grows, so a block once eligible stays eligible.
- Preemption parks a request instead of recomputing it when all its full blocks can move to cold
  room and none is shared; its partial last block is dropped, so it keeps `c // block_size *
  block_size` computed tokens. On resume its hot blocks come back (cold->gpu moves).
- Room for a running request may be reclaimed from parked requests, latest arrival first: their
  KV is dropped and they are recomputed (`is_parked` turns False). Without this, an early request
  could be starved by the cold KV of later ones waiting behind it.

Invariants (what the runner relies on, from `types.TransferPlan`):
- after a step's moves every block written this step is in the gpu tier; every cold block is full
  and computed (eligible implies `(i + 1) * block_size <= c`; parked requests keep full blocks only);
- moves are listed in execution order; ids freed by one move may be reused by a later move of the
  same plan and by this step's allocations;
- a move names its request only when the runner holds that request across this step (running and
  not in `new_reqs`); otherwise `req_id` is None and the move is bytes only: a parked request's
  table is not in the runner, and `new_reqs` already carry the table after the moves.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from itertools import chain
from typing import Protocol

from kvspill.kv.block_pool import KVBlock, KVCacheManager, KVRequest
from kvspill.kv.cold_pool import ColdBlockPool
from kvspill.kv.prefix_index import PrefixIndex
from kvspill.kv.tier_advice import TierSizes, hot_blocks_message, too_many_blocks_message
from kvspill.kv.tier_prefix import ColdPrefixCache
from kvspill.kv.tier_spill import Admission, KVWindow, SpillPicker
from kvspill.stats import RequestTierStats, TierCounters
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, TIER_NAMES, BlockMove, TransferPlan

# Every direction a block moves in, as named in `TierCounters.kv_block_moves` (kvspill/stats.py).
_DIRECTIONS = (
    (TIER_GPU, TIER_CPU),
    (TIER_CPU, TIER_DISK),
    (TIER_GPU, TIER_DISK),
    (TIER_CPU, TIER_GPU),
    (TIER_DISK, TIER_GPU),
)
MOVE_NAMES = {(src, dst): f"{TIER_NAMES[src]}->{TIER_NAMES[dst]}" for src, dst in _DIRECTIONS}


class TierConfig(Protocol):
    """The tier sizes and placement knobs (`SchedulerConfig` fits; kv does not import scheduler)."""

    @property
    def num_cpu_blocks(self) -> int: ...  # 0: no cpu tier

    @property
    def num_disk_blocks(self) -> int: ...  # 0: no disk tier

    @property
    def num_sink_blocks(self) -> int: ...

    @property
    def hot_window_tokens(self) -> int: ...


class KVTierManager(SpillPicker):
    """Where every request block lives (gpu, cpu, disk) and the moves of the current step."""

    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        config: TierConfig,
        arrival_seq: Mapping[str, int],
        windows: Mapping[str, KVWindow] | None = None,
    ) -> None:
        self.kv = kv_cache_manager
        self.block_size = kv_cache_manager.block_size
        self.cpu = ColdBlockPool(TIER_CPU, config.num_cpu_blocks)
        self.disk = ColdBlockPool(TIER_DISK, config.num_disk_blocks)
        # the server's window, for requests without their own
        self.window = KVWindow(config.num_sink_blocks, config.hot_window_tokens)
        self._windows = windows if windows is not None else {}  # the scheduler's, live: req_id -> own window
        self._arrival_seq = arrival_seq  # the scheduler's, live: req_id -> order of arrival
        self._requests: dict[str, KVRequest] = {}  # every request holding a block in any tier
        self._cold: dict[str, dict[int, tuple[int, int]]] = {}  # req_id -> logical idx -> (tier, id)
        self.prefix = ColdPrefixCache(self.cpu, self.disk, self.block_size)  # the cold tiers' caches
        self._parked: set[str] = set()
        self._spill_cursor: dict[str, int] = {}  # entries in [its sinks, cursor) are all cold
        self._cpu_order: list[tuple[int, int, str, int]] = []  # heap (idx, seq, req_id, cpu id), lazy
        self._moves: list[BlockMove] = []  # this step's plan, in execution order
        self.num_moves: Counter[tuple[int, int]] = Counter()  # (src tier, dst tier) -> blocks, since start
        self.num_parked = 0  # preemptions that spilled instead of recomputing
        self.num_parked_dropped = 0  # parked requests whose KV was dropped for room
        self.num_demoted = 0  # cached gpu blocks copied to the cpu tier's prefix cache on eviction
        self.prefixes = PrefixIndex()  # the chains requests left in the caches (kv/prefix_control.py)
        if self.cpu.num_blocks and kv_cache_manager.enable_prefix_caching:
            kv_cache_manager.block_pool.on_evict = self._demote_cached_gpu_block

    # ---- queries -----------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.cpu.num_blocks + self.disk.num_blocks > 0

    @property
    def num_free_cold_blocks(self) -> int:
        return self.cpu.num_free_blocks + self.disk.num_free_blocks

    def is_parked(self, request: KVRequest) -> bool:
        """True for a preempted request whose KV waits in the cold tiers (resume, not recompute)."""
        return request.req_id in self._parked

    def get_block_table(self, request: KVRequest) -> tuple[list[int], list[int]]:
        """(block_ids, block_tiers) by logical index; block_tiers is empty when all are gpu."""
        cold = self._cold.get(request.req_id, {})
        ids, tiers = [], []
        for i, block in enumerate(self.kv.get_blocks(request.req_id)):
            tier, block_id = (TIER_GPU, block.block_id) if block is not None else cold[i]
            ids.append(block_id)
            tiers.append(tier)
        return ids, (tiers if cold else [])

    def used_blocks(self) -> tuple[int, int, int]:
        """Blocks in use in the gpu, cpu and disk tiers (cheap: three counters)."""
        return (
            self.kv.num_blocks - self.kv.num_free_blocks,
            self.cpu.num_used_blocks,
            self.disk.num_used_blocks,
        )

    def stats(self) -> TierCounters:
        """Totals since start: blocks per tier, moves, prefix hits, parked preemptions (`/v1/kv`)."""
        kv = self.kv
        return TierCounters(
            num_gpu_blocks=kv.num_blocks,
            num_used_gpu_blocks=kv.num_blocks - kv.num_free_blocks,
            num_cpu_blocks=self.cpu.num_blocks,
            num_used_cpu_blocks=self.cpu.num_used_blocks,
            num_disk_blocks=self.disk.num_blocks,
            num_used_disk_blocks=self.disk.num_used_blocks,
            kv_block_moves={name: self.num_moves[key] for key, name in MOVE_NAMES.items()},
            prefix_hit_tokens={
                TIER_NAMES[t]: self.prefix.hit_tokens[t] for t in (TIER_GPU, TIER_CPU, TIER_DISK)
            },
            prefix_query_tokens=kv.prefix_cache_queries,
            prefix_cached_blocks={
                TIER_NAMES[TIER_GPU]: kv.block_pool.num_cached_blocks,
                TIER_NAMES[TIER_CPU]: self.cpu.num_cached_blocks,
                TIER_NAMES[TIER_DISK]: self.disk.num_cached_blocks,
            },
            num_spilled_preemptions=self.num_parked,
            num_dropped_spills=self.num_parked_dropped,
            num_demoted_prefix_blocks=self.num_demoted,
        )

    def request_stats(self, request: KVRequest) -> RequestTierStats:
        """Where one request's blocks are now."""
        tiers = Counter(tier for tier, _ in self._cold.get(request.req_id, {}).values())
        window = self.window_of(request.req_id)
        return RequestTierStats(
            status="preempted" if self.is_parked(request) else "running",
            num_gpu_blocks=sum(block is not None for block in self.kv.get_blocks(request.req_id)),
            num_cpu_blocks=tiers[TIER_CPU],
            num_disk_blocks=tiers[TIER_DISK],
            hot_window_tokens=window.hot_window_tokens,
            num_sink_blocks=window.num_sink_blocks,
        )

    def get_computed_blocks(self, request: KVRequest) -> tuple[list[KVBlock | None], int]:
        """Longest chain of cached full blocks at the start of the request, over all tiers
        (`ColdPrefixCache.find`: None entries are cold hits, waiting for `allocate_slots`)."""
        hits = self.prefix.find(self.kv, request)
        return hits, len(hits) * self.block_size

    def max_num_new_tokens(self, request: KVRequest, num_computed_tokens: int) -> int:
        """Most tokens one step may write so that the request's hot blocks fit the whole gpu tier.

        Its eligible blocks count as room only once they can leave: for a request that holds
        blocks here (running or parked), not for one being admitted with prefix hits. Cold blocks
        (cold prefix hits too, also among the sinks or in the hot window) need no gpu room. With
        no cold tier nothing can spill: the bound is the pool itself. Below 1: never fits.
        """
        req_id = request.req_id
        num_off_gpu = len(self.prefix.pending_hits.get(req_id, ()))  # admission: its cold hits
        if self.enabled and req_id in self._requests:
            window = self.window_of(req_id)
            limit = max(window.limit(num_computed_tokens, self.block_size), 0)
            num_off_gpu = max(limit - window.num_sink_blocks, 0)
            cold = self._cold.get(req_id, {})
            # cold prefix hits outside the eligible range [sinks, limit) (a parked request's come back)
            if cold and req_id not in self._parked:
                outside = chain(
                    range(min(window.num_sink_blocks, limit)), range(limit, len(self.kv.get_blocks(req_id)))
                )
                num_off_gpu += sum(1 for i in outside if i in cold)
        num_pinned = self._num_pinned_gpu_elsewhere(request, num_computed_tokens)
        return (self.kv.num_blocks + num_off_gpu - num_pinned) * self.block_size - num_computed_tokens

    def _num_pinned_gpu_elsewhere(self, request: KVRequest, num_computed_tokens: int) -> int:
        """Gpu blocks pinned by a prefix (`kv/prefix_control.py`) that are not among the request's
        computed blocks: room it can never have while they stay pinned."""
        pinned = self.prefixes.pinned_gpu_hashes
        if not pinned:
            return 0
        hashes = request.block_hashes[: num_computed_tokens // self.block_size]
        return max(self.prefixes.num_pinned(TIER_GPU) - sum(1 for h in hashes if h in pinned), 0)

    def never_fits_message(self, request: KVRequest, num_computed_tokens: int) -> str | None:
        """Why the request can never be scheduled (with what to change), or None when it can."""
        window = self.window_of(request.req_id)
        sizes = TierSizes(
            block_size=self.block_size,
            num_gpu_blocks=self.kv.num_blocks,
            num_cpu_blocks=self.cpu.num_blocks,
            num_disk_blocks=self.disk.num_blocks,
            num_sink_blocks=window.num_sink_blocks,
            hot_window_tokens=window.hot_window_tokens,
        )
        message = too_many_blocks_message(sizes, request)
        if message is None and self.enabled and self.max_num_new_tokens(request, num_computed_tokens) < 1:
            return hot_blocks_message(sizes, request)
        return message

    # ---- allocation, preemption, free --------------------------------------------------

    def allocate_slots(
        self,
        request: KVRequest,
        num_new_tokens: int,
        new_computed_blocks: Sequence[KVBlock | None] = (),
        reclaim: bool = False,
    ) -> list[int] | None:
        """`KVCacheManager.allocate_slots`, spilling eligible gpu blocks first when the pool is short.

        Brings a resumed parked request's hot blocks back. `reclaim`: room for the spills may
        be taken from parked requests (for running requests, never for admission). Returns the
        new gpu block ids, or None with nothing changed.
        """
        req_id = request.req_id
        bring_back: list[int] = []  # a running request's cold blocks stay eligible: only a resume
        if req_id in self._parked:
            c = request.num_computed_tokens
            bring_back = sorted(i for i in self._cold[req_id] if not self._is_eligible(req_id, c, i))
        cold_hits = self.prefix.pending_hits.pop(req_id, {}) if None in new_computed_blocks else {}
        num_needed = self.kv.num_blocks_to_allocate(request, num_new_tokens, new_computed_blocks)
        num_deficit = num_needed + len(bring_back) - self.kv.num_free_blocks
        if num_deficit > 0:
            if not self.enabled:
                return None
            admission = Admission.of(request, new_computed_blocks, self)
            picks = self._pick_spills(num_deficit, admission)
            # The cold hits are taken before the spills: their cached-free blocks are no room.
            num_hits_free = self.prefix.num_cached_free(cold_hits)
            if len(picks) < num_deficit or (
                self.num_free_cold_blocks - num_hits_free < num_deficit
                and not (reclaim and self._reclaim_cold_room(num_deficit + num_hits_free, keep=req_id))
            ):
                if cold_hits:
                    self.prefix.pending_hits[req_id] = cold_hits  # still valid: nothing changed
                return None
            self._cold.setdefault(req_id, {}).update(self.prefix.take(cold_hits))
            new_computed_blocks = list(new_computed_blocks)
            for i, holders, joins in picks:
                tier, block_id = self._spill_block(holders, i)
                if joins:  # the admitted request's gpu hit left with its holders: a cold hit now
                    new_computed_blocks[i] = None
                    self._cold.setdefault(req_id, {}).update(self.prefix.take({i: (tier, block_id)}))
        if cold_hits:
            self._cold.setdefault(req_id, {}).update(self.prefix.take(cold_hits))
        self._requests[req_id] = request
        if req_id in self._parked:  # resumed: its table fills again from the hot blocks
            self._parked.discard(req_id)
            self._spill_cursor.pop(req_id, None)
        for i in bring_back:
            tier, block_id = self._cold[req_id].pop(i)
            gpu_id = self.kv.load_block(req_id, i)
            self._pool(tier).free(block_id)
            self._record(req_id, i, tier, block_id, TIER_GPU, gpu_id)
        new_block_ids = self.kv.allocate_slots(request, num_new_tokens, new_computed_blocks)
        assert new_block_ids is not None, "the deficit was spilled"
        if new_computed_blocks:
            num_gpu_hits = sum(block is not None for block in new_computed_blocks)
            self.prefix.hit_tokens[TIER_GPU] += num_gpu_hits * self.block_size
            self.prefixes.note_hit(request.block_hashes[: len(new_computed_blocks)])
        return new_block_ids

    def preempt(self, request: KVRequest) -> int:
        """Park the request's KV in the cold tiers if there is room, else free it.

        Returns the computed tokens it keeps: its full blocks' tokens when parked, 0 to recompute.
        """
        req_id = request.req_id
        num_full = request.num_computed_tokens // self.block_size
        blocks = self.kv.get_blocks(req_id)
        to_spill = [i for i, block in enumerate(blocks[:num_full]) if block is not None]
        shared = any(block is not None and block.ref_cnt > 1 for block in blocks[:num_full])
        if not self.enabled or num_full == 0 or shared or len(to_spill) > self.num_free_cold_blocks:
            self.free(request)
            return 0
        self.kv.truncate(req_id, num_full)  # the partial last block cannot go cold
        for i in to_spill:
            self._spill_block([req_id], i)
        self._parked.add(req_id)
        self.num_parked += 1
        return num_full * self.block_size

    def free(self, request: KVRequest) -> None:
        """Release the request's blocks in every tier."""
        req_id = request.req_id
        hashes = request.block_hashes if self.kv.enable_prefix_caching else []
        self.prefix.free_request(self._cold.pop(req_id, {}), hashes, self.kv.get_blocks(req_id))
        self.kv.free(request)
        self._record_prefix(request)
        self.prefix.pending_hits.pop(req_id, None)
        self._requests.pop(req_id, None)
        self._parked.discard(req_id)
        self._spill_cursor.pop(req_id, None)

    def _record_prefix(self, request: KVRequest) -> None:
        """Name the chain a freed request left in the caches: its leading blocks some tier holds."""
        if not self.kv.enable_prefix_caching:
            return
        hashes = request.block_hashes[: request.num_computed_tokens // self.block_size]
        n = 0
        while n < len(hashes) and self.is_cached(hashes[n]):
            n += 1
        self.prefixes.record(hashes[:n], self.is_cached)

    def is_cached(self, block_hash: int) -> bool:
        """Whether some tier's prefix cache holds this block."""
        return (
            self.kv.block_pool.get_cached_block(block_hash) is not None
            or self.prefix.lookup(block_hash) is not None
        )

    def record_move(self, src_tier: int, src_id: int, dst_tier: int, dst_id: int) -> None:
        """A bytes-only move of a cached block no request holds (`kv/prefix_control.py`), run with
        the next transfer plan taken."""
        self._record(None, -1, src_tier, src_id, dst_tier, dst_id)

    def drop_for_retry(self, request: KVRequest) -> None:
        """Free a failed step's request for a retry from scratch: its gpu blocks leave the prefix
        cache first (the failed step may have written them), then everything is freed."""
        self.kv.forget_hashes(request.req_id)
        self.free(request)

    def take_transfer_plan(self, held_req_ids: Collection[str]) -> TransferPlan:
        """This step's moves; `req_id` kept only for requests the runner holds across the step."""
        moves, self._moves = self._moves, []
        return TransferPlan([m if m.req_id in held_req_ids else replace(m, req_id=None) for m in moves])

    # ---- spilling ----------------------------------------------------------------------

    def _spill_block(self, holders: Sequence[str], logical_idx: int) -> tuple[int, int]:
        """gpu -> cpu (pushing the oldest cpu block to disk first when the cpu tier is full), or
        gpu -> disk; returns the cold (tier, id). A shared block moves once: every holder's table
        points at the one cold copy (one move per holder, the same bytes: `transfer.group_moves`
        copies them once). The copy is findable by its prefix hash at once."""
        if self.cpu.num_blocks and not self.cpu.num_free_blocks:
            self._demote_oldest_cpu_block()  # may find none: the cpu tier holds only prefix hits
        pool = self.cpu if self.cpu.num_free_blocks else self.disk
        gpu_id = self.kv.evict_block(holders, logical_idx)
        block_id = self._place_cold(holders[0], logical_idx, pool, TIER_GPU, gpu_id)
        for req_id in holders[1:]:
            pool.touch(block_id)
            self._cold.setdefault(req_id, {})[logical_idx] = (pool.tier, block_id)
            self._moves.append(BlockMove(req_id, logical_idx, TIER_GPU, gpu_id, pool.tier, block_id))
        hashes = self._requests[holders[0]].block_hashes if self.kv.enable_prefix_caching else []
        if logical_idx < len(hashes):
            self.prefix.cache(pool.tier, block_id, hashes[logical_idx])
        return pool.tier, block_id

    def _demote_oldest_cpu_block(self) -> None:
        while self._cpu_order:
            logical_idx, _, req_id, cpu_id = heapq.heappop(self._cpu_order)
            # Only a block this request holds alone: a stale entry can match a re-admitted request's
            # prefix hit at the same index, maybe shared (moving it would not free its cpu block).
            if (
                self._cold.get(req_id, {}).get(logical_idx) == (TIER_CPU, cpu_id)
                and self.cpu.ref_cnt(cpu_id) == 1
            ):
                # A copy: a shared or cached block stays valid in the cpu tier for the others.
                self.cpu.free(cpu_id)
                self._place_cold(req_id, logical_idx, self.disk, TIER_CPU, cpu_id)
                return
            # else a stale entry: that block was freed or brought back

    def _place_cold(
        self, req_id: str, logical_idx: int, pool: ColdBlockPool, src_tier: int, src_id: int
    ) -> int:
        block_id = pool.allocate()
        self._cold.setdefault(req_id, {})[logical_idx] = (pool.tier, block_id)
        if pool.tier == TIER_CPU:
            heapq.heappush(self._cpu_order, (logical_idx, self._arrival_seq[req_id], req_id, block_id))
            if len(self._cpu_order) > 2 * self.cpu.num_blocks + 64:
                self._compact_cpu_order()
        self._record(req_id, logical_idx, src_tier, src_id, pool.tier, block_id)
        return block_id

    def _demote_cached_gpu_block(self, gpu_id: int, block_hash: int) -> None:
        """`BlockPool.on_evict`: copy a cached gpu block about to be reused into the cpu tier's
        cache (`ColdPrefixCache.demote`), recorded before the move or write that reuses it."""
        cpu_id = self.prefix.demote(block_hash)
        if cpu_id is not None:
            self._record(None, -1, TIER_GPU, gpu_id, TIER_CPU, cpu_id)  # bytes only: no request holds it
            self.num_demoted += 1

    def _compact_cpu_order(self) -> None:
        self._cpu_order = [
            (i, self._arrival_seq[req_id], req_id, block_id)
            for req_id, cold in self._cold.items()
            for i, (tier, block_id) in cold.items()
            if tier == TIER_CPU
        ]
        heapq.heapify(self._cpu_order)

    def _reclaim_cold_room(self, num_blocks: int, keep: str) -> bool:
        """Drop parked requests' KV, latest arrival first, until `num_blocks` cold blocks are free.

        Drops none and returns False when even dropping all would not do. Only blocks a parked
        request holds alone count (a prefix hit shared with others stays in use).
        """
        parked = sorted(self._parked - {keep}, key=self._arrival_seq.__getitem__, reverse=True)
        exclusive = sum(
            self._pool(tier).ref_cnt(block_id) == 1
            for r in parked
            for tier, block_id in self._cold.get(r, {}).values()
        )
        if self.num_free_cold_blocks + exclusive < num_blocks:
            return False
        for req_id in parked:
            if self.num_free_cold_blocks >= num_blocks:
                break
            self.free(self._requests[req_id])
            self.num_parked_dropped += 1
        # Short only when freed blocks stay pinned for the persist writer (storage/persist.py).
        return self.num_free_cold_blocks >= num_blocks

    def _record(
        self, req_id: str | None, logical_idx: int, src_tier: int, src_id: int, dst_tier: int, dst_id: int
    ) -> None:
        self._moves.append(BlockMove(req_id, logical_idx, src_tier, src_id, dst_tier, dst_id))
        self.num_moves[(src_tier, dst_tier)] += 1

    def _pool(self, tier: int) -> ColdBlockPool:
        return self.cpu if tier == TIER_CPU else self.disk
