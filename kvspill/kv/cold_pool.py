"""Block ids of one cold tier (cpu or disk) and its prefix cache (pure Python).

A cold block is free, used (`ref_cnt > 0`: in the block tables of requests, or pinned while the
persist writer reads it) or cached-free (`ref_cnt == 0` with a prefix hash: findable by later
requests, evicted LRU when the tier needs room).

Invariants:
- `num_free_blocks` counts free and cached-free blocks: both are room for spills, a cached-free
  block is simply evicted (its hash forgotten) when it is handed out again.
- `allocate` takes the lowest free id first (deterministic for tests), then the least recently
  used cached-free block; a block with `ref_cnt > 0` is never evicted.
- One block per hash per tier; a hash is only ever given to a full block whose KV is computed
  (the caller's guarantee: cold blocks always are).
- A retired block (its storage failed, `retire`) has no hash and is never handed out again;
  `num_blocks` counts the blocks not retired. One still in use stays until its holders free it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable

from kvspill.types import TIER_NAMES


class ColdBlockPool:
    """Block ids of one cold tier (cpu or disk). `num_blocks == 0` means the tier is absent."""

    def __init__(self, tier: int, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must not be negative, got {num_blocks}")
        self.tier = tier
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))  # a heap: lowest id first, deterministic for tests
        self._ref_cnt: dict[int, int] = {}  # used blocks only
        self._hash_of: dict[int, int] = {}  # block id -> prefix hash, used or cached-free
        self._by_hash: dict[int, int] = {}  # prefix hash -> block id
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached-free ids, least recently used first
        self._retired: set[int] = set()  # ids taken out for good (`retire`)
        self.num_hits = 0  # blocks found by prefix lookups since start
        self.num_evicted = 0  # cached blocks whose hash was dropped for room

    @property
    def num_free_blocks(self) -> int:
        """Room: free blocks plus cached-free blocks (evicted when handed out)."""
        return len(self._free) + len(self._lru)

    @property
    def num_truly_free_blocks(self) -> int:
        """Free blocks that hold no cached prefix."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return len(self._ref_cnt)  # retired blocks still held count too

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable by prefix hash (used or cached-free)."""
        return len(self._by_hash)

    def allocate(self) -> int:
        if self._free:
            block_id = heapq.heappop(self._free)
        elif self._lru:
            block_id, _ = self._lru.popitem(last=False)
            del self._by_hash[self._hash_of.pop(block_id)]
            self.num_evicted += 1
        else:
            raise ValueError(f"the {TIER_NAMES[self.tier]} tier has no free block")
        self._ref_cnt[block_id] = 1
        return block_id

    def free(self, block_id: int) -> None:
        """Drop one reference; an unreferenced cached block stays findable (most recently used)."""
        count = self._ref_cnt.get(block_id, 0)
        if count <= 0:
            raise ValueError(f"{TIER_NAMES[self.tier]} block {block_id} freed more often than allocated")
        if count > 1:
            self._ref_cnt[block_id] = count - 1
            return
        del self._ref_cnt[block_id]
        if block_id in self._retired:
            return  # out of the tier for good
        if block_id in self._hash_of:
            self._lru[block_id] = None
        else:
            heapq.heappush(self._free, block_id)

    def touch(self, block_id: int) -> None:
        """Take a reference on a cached block (a prefix hit, or a pin for the persist writer)."""
        if block_id in self._lru:
            del self._lru[block_id]
            self._ref_cnt[block_id] = 1
        elif block_id in self._ref_cnt:
            self._ref_cnt[block_id] += 1
        else:
            raise ValueError(f"{TIER_NAMES[self.tier]} block {block_id} is neither used nor cached")

    def cache(self, block_id: int, block_hash: int) -> bool:
        """Make a used block findable by `block_hash`; False when the tier has that hash already."""
        if block_hash in self._by_hash or block_id in self._hash_of or block_id in self._retired:
            return False
        if block_id not in self._ref_cnt:
            raise ValueError(
                f"{TIER_NAMES[self.tier]} block {block_id} is not in use: cache it before freeing"
            )
        self._hash_of[block_id] = block_hash
        self._by_hash[block_hash] = block_id
        return True

    def lookup(self, block_hash: int) -> int | None:
        return self._by_hash.get(block_hash)

    def ref_cnt(self, block_id: int) -> int:
        return self._ref_cnt.get(block_id, 0)

    def is_cached(self, block_id: int) -> bool:
        """True for a block findable by its prefix hash (used or cached-free)."""
        return block_id in self._hash_of

    def is_cached_free(self, block_id: int) -> bool:
        return block_id in self._lru

    def free_block_ids(self) -> list[int]:
        """Free ids, lowest first, then cached-free ids in eviction order. For tests and debugging."""
        return sorted(self._free) + list(self._lru)

    def cached_free_block_ids(self) -> list[int]:
        return list(self._lru)

    def retire(self, block_ids: Iterable[int]) -> int:
        """Take blocks out of the tier for good (a read or write of them failed): they lose their
        prefix hash, are never handed out again, and `num_blocks` shrinks by them; a block in use
        stays with its holders until freed. Returns how many were retired by this call."""
        new = {
            b for b in block_ids if b not in self._retired and 0 <= b < len(self._retired) + self.num_blocks
        }
        for block_id in new:
            block_hash = self._hash_of.pop(block_id, None)
            if block_hash is not None:
                del self._by_hash[block_hash]
            self._lru.pop(block_id, None)
        if new:
            self._free = [b for b in self._free if b not in new]
            heapq.heapify(self._free)
        self._retired |= new
        self.num_blocks -= len(new)
        return len(new)

    def retire_all(self) -> int:
        """Retire every block: the tier takes no new block (its storage cannot be written)."""
        return self.retire(range(len(self._retired) + self.num_blocks))

    def uncache(self, block_id: int) -> bool:
        """Forget a cached-free block's hash, making it free; False for a block in use or not cached."""
        if block_id not in self._lru:
            return False
        del self._lru[block_id]
        del self._by_hash[self._hash_of.pop(block_id)]
        heapq.heappush(self._free, block_id)
        return True

    def reset(self) -> None:
        """Forget every cached-free block's hash (used blocks keep theirs)."""
        for block_id in self._lru:
            del self._by_hash[self._hash_of.pop(block_id)]
            heapq.heappush(self._free, block_id)
        self._lru.clear()
