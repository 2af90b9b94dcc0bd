"""The cold tiers' prefix caches as `kv/tiers.py` uses them (pure Python): lookups, the hits
waiting for admission, caching a freed request's blocks, and the persist dir's side.

See `kv/tiers.py` (module doc, "Prefix cache in every tier") for the rules and `kv/cold_pool.py`
for one tier's cache.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from kvspill.errors import DiskTierIOError
from kvspill.kv.block_pool import KVBlock, KVCacheManager, KVRequest
from kvspill.kv.cold_pool import ColdBlockPool
from kvspill.types import TIER_CPU, TIER_GPU

logger = logging.getLogger(__name__)

ColdHits = dict[int, tuple[int, int]]  # logical idx -> (tier, block id)


class ColdPrefixCache:
    def __init__(self, cpu: ColdBlockPool, disk: ColdBlockPool, block_size: int) -> None:
        self.cpu, self.disk = cpu, disk
        self.block_size = block_size
        # Cold prefix hits found by the last lookup of a request not admitted yet.
        self.pending_hits: dict[str, ColdHits] = {}
        self.hit_tokens: Counter[int] = Counter()  # tier -> tokens found there at admission
        # Blocks that entered a prefix cache, as (tier, id, hash), until `take_newly_cached` (the
        # persist writer's queue); None: nobody takes them, nothing is pinned.
        self.newly_cached: list[tuple[int, int, int]] | None = None

    def pool(self, tier: int) -> ColdBlockPool:
        return self.cpu if tier == TIER_CPU else self.disk

    def lookup(self, block_hash: int) -> tuple[int, int] | None:
        """The cpu copy of a block, else the disk one, as (tier, id); None when neither has it."""
        for pool in (self.cpu, self.disk):
            block_id = pool.lookup(block_hash)
            if block_id is not None:
                return pool.tier, block_id
        return None

    def find(self, kv: KVCacheManager, request: KVRequest) -> list[KVBlock | None]:
        """Longest chain of cached full blocks at the start of the request, over all tiers.

        Per block: the gpu copy, else the cpu one, else the disk one (a None entry; the cold hits
        wait in `pending_hits` for admission). Never the whole sequence (the last token's logits
        must be computed), and at most `num_gpu_blocks - 1` gpu hits: hits cannot spill in the
        step that takes them, so a long gpu hit could otherwise fill the whole gpu tier.
        """
        self.pending_hits.pop(request.req_id, None)
        if not kv.enable_prefix_caching:
            return []
        hits: list[KVBlock | None] = []
        cold: ColdHits = {}
        num_gpu_hits = 0
        for i, block_hash in enumerate(request.block_hashes[: (request.num_tokens - 1) // self.block_size]):
            block = kv.block_pool.get_cached_block(block_hash)
            if block is not None and num_gpu_hits < kv.num_blocks - 1:
                hits.append(block)
                num_gpu_hits += 1
                continue
            found = self.lookup(block_hash)
            if found is None:
                break
            hits.append(None)
            cold[i] = found
        if cold:
            self.pending_hits[request.req_id] = cold
        return hits

    def num_cached_free(self, hits: ColdHits) -> int:
        """How many of `hits` are cached-free (counted as room until they are taken)."""
        return sum(self.pool(tier).is_cached_free(block_id) for tier, block_id in hits.values())

    def take(self, hits: ColdHits) -> ColdHits:
        """Reference the hits (admission) and count them; returns them, once (`hits` is emptied)."""
        taken = dict(hits)
        for tier, block_id in taken.values():
            pool = self.pool(tier)
            pool.touch(block_id)
            pool.num_hits += 1
            self.hit_tokens[tier] += self.block_size
        hits.clear()
        return taken

    def free_request(
        self, cold: ColdHits, hashes: Sequence[int], gpu_blocks: Sequence[KVBlock | None]
    ) -> None:
        """Free a request's cold blocks, caching the full ones under `hashes` (empty: caching off).

        Its gpu blocks are only reported to the persist writer (the gpu tier caches its own).
        """
        if self.newly_cached is not None and hashes:
            self.newly_cached.extend(
                (TIER_GPU, b.block_id, b.block_hash)
                for b in gpu_blocks[: len(hashes)]
                if b is not None and b.block_hash is not None
            )
        # Last block first: the start of a prefix, shared most, is the last to be evicted (LRU).
        for i, (tier, block_id) in sorted(cold.items(), reverse=True):
            if i < len(hashes):  # a spilled block has its hash already (`cache`: a no-op then)
                self.cache(tier, block_id, hashes[i])
            self.pool(tier).free(block_id)

    def cache(self, tier: int, block_id: int, block_hash: int) -> None:
        """Make a used cold block findable by its prefix hash (a cold block is full and computed),
        unless the tier has that hash already; queued for the persist writer when it is new.
        Spilled blocks are cached as they spill, so a request arriving while their owner runs
        shares them as cold hits instead of recomputing them."""
        pool = self.pool(tier)
        if pool.cache(block_id, block_hash) and self.newly_cached is not None:
            pool.touch(block_id)  # pinned until the persist writer has read it
            self.newly_cached.append((tier, block_id, block_hash))

    def demote(self, block_hash: int) -> int | None:
        """A cpu block, cached under `block_hash` and free (the tier's most recently used), for a
        copy of a cached gpu block the gpu tier is about to reuse; it takes a free cpu block, else
        the least recently used cached-free one. None (the block is lost, as before) when a cold
        tier has that hash already or the cpu tier has no room; never the disk tier (too slow)."""
        if not self.cpu.num_free_blocks or self.lookup(block_hash) is not None:
            return None
        cpu_id = self.cpu.allocate()
        self.cpu.cache(cpu_id, block_hash)
        self.cpu.free(cpu_id)
        return cpu_id

    def on_disk_error(self, error: DiskTierIOError) -> None:
        """The disk tier's file failed (`storage/disk_pool.py`). Once it is broken (a failed write, a
        truncated file) it takes no new block: spills go to the cpu tier or wait, as when it is
        full. After another failed read the blocks named are retired, so no prefix lookup finds
        them again. Blocks in use stay with their requests (reading them fails those requests'
        steps); call before those requests are freed, so their blocks leave the tier instead of
        going to its prefix cache."""
        if error.broken:
            if self.disk.num_blocks:
                logger.error("disk KV tier disabled: no more spills to it until restart (%s)", error)
            self.disk.retire_all()
            return
        num_retired = self.disk.retire(error.block_ids)
        if num_retired:
            logger.warning("disk KV tier: %d blocks retired after a failed read, %d left (%s)",
                           num_retired, self.disk.num_blocks, error)  # fmt: skip

    # ---- the persist dir's side (storage/persist.py, driven by the engine) -------------------

    def take_newly_cached(self) -> list[tuple[int, int, int]]:
        """Blocks freed into a prefix cache since the last call, as (tier, id, hash): cold ones are
        pinned until `release_pin`; gpu ones are not (copy them before the next `schedule()`)."""
        if self.newly_cached is None:
            return []
        taken, self.newly_cached = self.newly_cached, []
        return taken

    def release_pin(self, tier: int, block_id: int) -> None:
        self.pool(tier).free(block_id)

    def allocate_for_load(self) -> tuple[int, int] | None:
        """A truly free cold block (cpu first, then disk) for a block read from the persist dir, or
        None. Never a cached-free one: that could be an earlier block of the same prefix."""
        for pool in (self.cpu, self.disk):
            if pool.num_truly_free_blocks:
                return pool.tier, pool.allocate()
        return None

    def finish_load(self, tier: int, block_id: int, block_hash: int | None) -> None:
        """The load of `allocate_for_load`'s block is done: cache it under `block_hash` (None: the
        load failed) and free it, so a prefix lookup finds it as a cold hit."""
        pool = self.pool(tier)
        if block_hash is not None:
            pool.cache(block_id, block_hash)
        pool.free(block_id)
