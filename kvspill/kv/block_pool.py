"""KV block bookkeeping: the block pool, the prefix cache and per-request block tables.

Pure Python (no torch): this module decides which block ids each request owns; the runner's
KV storage only ever indexes its block dimension with them. vLLM v1's BlockPool and
KVCacheManager, single KV group, gpu tier only: `kv/tiers.py` decides which blocks leave it for the
cpu/disk tiers and tells this module through `evict_block`/`load_block`.

Invariants:
- Every block id in `0..num_blocks-1` is usable. No block is reserved as a null/padding block:
  the runner pads block tables and slot mappings by itself (a padded slot is never read), so
  a reserved block would only waste capacity in the small pools the tests use.
- A block is in the free queue iff its `ref_cnt == 0`. The free queue is the eviction order:
  freed blocks go to the tail, allocation takes from the head (LRU).
- A freed block keeps its `block_hash` and stays findable in the prefix cache until
  `allocate` hands it out again; only then is its hash entry evicted.
- Only full blocks whose tokens have all been computed are cached (`cache_full_blocks`), so a
  hit never points at KV that was not written. One block per hash: when two requests computed
  the same block at once, the second copy simply stays uncached.
- A request's blocks are freed tail first, so its last blocks are evicted before the prefix
  blocks that other requests are more likely to share.
- `allocate_slots` is all or nothing: on failure nothing changes.
- A request's block table holds one entry per logical block: its `KVBlock`, or None while that
  block lives in a cold tier (`kv/tiers.py` knows where). A block leaves the gpu tier only with
  `ref_cnt == 1` and drops its hash here when it does; the cold tiers have their own prefix
  caches (`kv/cold_pool.py`), and a prefix hit there is a None entry in `new_computed_blocks`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(eq=False)
class KVBlock:
    """One block of `block_size` token slots in the KV cache."""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None  # set once the block is full, computed and cached


class KVRequest(Protocol):
    """What the KV manager reads from a request (`kvspill.scheduler.request.Request` fits).

    Declared here so that `kv` does not import `scheduler` (the layers point the other way).
    """

    @property
    def req_id(self) -> str: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_computed_tokens(self) -> int: ...

    @property
    def block_hashes(self) -> list[int]: ...


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockPool:
    """Owns all blocks, the LRU free queue and the hash -> block map of the prefix cache."""

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(block_id) for block_id in range(num_blocks)]
        # Insertion order is eviction order; O(1) removal of a cache hit from the middle.
        self._free_queue: OrderedDict[int, KVBlock] = OrderedDict((b.block_id, b) for b in self.blocks)
        self._cached_block_hash_to_block: dict[int, KVBlock] = {}
        # Called as (block id, hash) when `allocate` is about to reuse a cached block: the last
        # moment its KV can be copied elsewhere (kv/tiers.py demotes it to the cpu tier's cache).
        self.on_evict: Callable[[int, int], None] | None = None

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_queue)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (cached but free blocks count as free)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached_block_hash_to_block)

    def free_block_ids(self) -> list[int]:
        """The free queue, head (next to be allocated) first. For tests and debugging."""
        return list(self._free_queue)

    def get_cached_block(self, block_hash: int) -> KVBlock | None:
        if not self.enable_caching:
            return None
        return self._cached_block_hash_to_block.get(block_hash)

    def touch(self, blocks: Iterable[KVBlock | None]) -> None:
        """Take a reference on prefix-cache hits, pulling free ones out of the free queue."""
        for block in blocks:
            if block is None:  # a hit in a cold tier: kv/tiers.py holds it
                continue
            if block.ref_cnt == 0:
                del self._free_queue[block.block_id]
            block.ref_cnt += 1

    def allocate(self, num_blocks: int) -> list[KVBlock]:
        """Take `num_blocks` from the head of the free queue, evicting their cached hashes."""
        if num_blocks > self.num_free_blocks:
            raise ValueError(f"cannot allocate {num_blocks} blocks: only {self.num_free_blocks} are free")
        allocated = []
        for _ in range(num_blocks):
            _, block = self._free_queue.popitem(last=False)
            if self.on_evict is not None and self._is_cached_copy(block):
                assert block.block_hash is not None
                self.on_evict(block.block_id, block.block_hash)
            self._evict_hash(block)
            block.ref_cnt = 1
            allocated.append(block)
        return allocated

    def take_uncached(self, max_blocks: int) -> list[KVBlock]:
        """Up to `max_blocks` free blocks that hold no cached prefix, taken (ref_cnt 1), for KV read
        from elsewhere (the persist dir): cached blocks are left alone. One pass over the queue."""
        taken: list[KVBlock] = []
        for block in list(self._free_queue.values()):
            if len(taken) == max_blocks:
                break
            if self._is_cached_copy(block):
                continue
            del self._free_queue[block.block_id]
            self._evict_hash(block)
            block.ref_cnt = 1
            taken.append(block)
        return taken

    def cache_loaded(self, block: KVBlock, block_hash: int | None) -> None:
        """A `take_uncached` block's KV is in: cache it under `block_hash` (None: the read failed,
        or caching is off) unless that hash is cached already, then free it (cached-free)."""
        if block_hash is not None and self.enable_caching:
            self._register(block, block_hash)
        self.free([block])

    def free(self, blocks: Iterable[KVBlock]) -> None:
        """Drop one reference per block, in the order given; unreferenced blocks go to the tail."""
        for block in blocks:
            if block.ref_cnt <= 0:
                raise ValueError(f"block {block.block_id} freed more often than allocated")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._free_queue[block.block_id] = block

    def cache_full_blocks(
        self,
        request: KVRequest,
        blocks: Sequence[KVBlock | None],
        num_full_blocks: int,
        num_cached_blocks: int = 0,
    ) -> None:
        """Register `blocks[num_cached_blocks:num_full_blocks]` under the request's block hashes.

        The caller guarantees those blocks are full and their KV computed. None entries (blocks
        in a cold tier) are skipped: only gpu blocks are shared.
        """
        if not self.enable_caching:
            return
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block is None or block.block_hash is not None:  # cold, or a prefix hit: already cached
                continue
            self._register(block, request.block_hashes[i])

    def uncache(self, block: KVBlock) -> bool:
        """Forget a cached-free block's hash (it stays free, at its place in the queue); False for
        a block in use or not cached (a clear of the prefix cache leaves those)."""
        if block.ref_cnt or not self._is_cached_copy(block):
            return False
        self._evict_hash(block)
        return True

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash. Only when no request holds a block; returns success."""
        if self.num_free_blocks != self.num_blocks:
            return False
        for block in self.blocks:
            block.block_hash = None
        self._cached_block_hash_to_block.clear()
        return True

    def _register(self, block: KVBlock, block_hash: int) -> None:
        """Make `block` findable under `block_hash`, unless another block holds that hash (the same
        KV computed twice concurrently, or loaded twice): the first copy stays."""
        if block_hash not in self._cached_block_hash_to_block:
            block.block_hash = block_hash
            self._cached_block_hash_to_block[block_hash] = block

    def _is_cached_copy(self, block: KVBlock) -> bool:
        """Whether `block` is the one the prefix cache finds under its hash."""
        return (
            block.block_hash is not None and self._cached_block_hash_to_block.get(block.block_hash) is block
        )

    def _evict_hash(self, block: KVBlock) -> None:
        if self._is_cached_copy(block):
            assert block.block_hash is not None
            del self._cached_block_hash_to_block[block.block_hash]
        block.block_hash = None


class KVCacheManager:
    """Per-request block tables on top of a `BlockPool`, with prefix-cache lookups and stats."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.block_pool = BlockPool(num_blocks, enable_prefix_caching)
        self._req_to_blocks: dict[str, list[KVBlock | None]] = {}  # None: the block is in a cold tier
        self._num_cached_blocks: dict[str, int] = {}
        self.prefix_cache_queries = 0  # tokens looked up, counted once per admission
        self.prefix_cache_hits = 0  # tokens found

    # ---- stats -------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return self.block_pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    @property
    def usage(self) -> float:
        return self.block_pool.usage

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    # ---- per request -------------------------------------------------------------------

    def get_computed_blocks(self, request: KVRequest) -> tuple[list[KVBlock | None], int]:
        """Longest chain of cached full blocks at the start of the request's tokens.

        Never the whole sequence: the last token must be computed so that its logits exist,
        hence at most `(num_tokens - 1) // block_size` blocks. No side effects: the hit is
        taken (and counted) by `allocate_slots`.
        """
        if not self.enable_prefix_caching:
            return [], 0
        max_num_blocks = (request.num_tokens - 1) // self.block_size
        computed: list[KVBlock | None] = []
        for block_hash in request.block_hashes[:max_num_blocks]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            computed.append(block)
        return computed, len(computed) * self.block_size

    def num_blocks_to_allocate(
        self, request: KVRequest, num_new_tokens: int, new_computed_blocks: Sequence[KVBlock | None] = ()
    ) -> int:
        """Free blocks that `allocate_slots` would consume, prefix hits taken from the free queue included."""
        num_computed = request.num_computed_tokens + len(new_computed_blocks) * self.block_size
        num_required = cdiv(num_computed + num_new_tokens, self.block_size)
        num_held = len(self._req_to_blocks.get(request.req_id, ())) + len(new_computed_blocks)
        num_evictable_hits = sum(
            1 for block in new_computed_blocks if block is not None and block.ref_cnt == 0
        )
        return max(num_required - num_held, 0) + num_evictable_hits

    def allocate_slots(
        self, request: KVRequest, num_new_tokens: int, new_computed_blocks: Sequence[KVBlock | None] = ()
    ) -> list[int] | None:
        """Make room for `num_new_tokens` more tokens after the computed ones.

        `new_computed_blocks` are prefix hits from `get_computed_blocks` (first allocation
        only; None: a hit in a cold tier, which `kv/tiers.py` holds); they are counted as computed on top of `request.num_computed_tokens`. Returns
        the ids of blocks appended to the request's block table (hits first), or None when the
        pool cannot cover them, in which case nothing has changed.
        """
        if self.num_blocks_to_allocate(request, num_new_tokens, new_computed_blocks) > self.num_free_blocks:
            return None
        first_allocation = request.req_id not in self._req_to_blocks
        if new_computed_blocks and not first_allocation:
            raise ValueError(f"request {request.req_id}: prefix hits are only taken at its first allocation")
        blocks = self._req_to_blocks.setdefault(request.req_id, [])
        if first_allocation and self.enable_prefix_caching:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += len(new_computed_blocks) * self.block_size
        self.block_pool.touch(new_computed_blocks)
        blocks.extend(new_computed_blocks)
        if first_allocation:
            self._num_cached_blocks[request.req_id] = len(new_computed_blocks)
        num_computed = request.num_computed_tokens + len(new_computed_blocks) * self.block_size
        num_new_blocks = cdiv(num_computed + num_new_tokens, self.block_size) - len(blocks)
        new_blocks = self.block_pool.allocate(max(num_new_blocks, 0))
        blocks.extend(new_blocks)
        hit_ids = [block.block_id for block in new_computed_blocks if block is not None]
        return hit_ids + [block.block_id for block in new_blocks]

    def cache_blocks(self, request: KVRequest, num_computed_tokens: int) -> None:
        """Cache the request's blocks that `num_computed_tokens` computed tokens have filled."""
        blocks = self._req_to_blocks.get(request.req_id)
        if blocks is None or not self.enable_prefix_caching:
            return
        num_full_blocks = min(num_computed_tokens // self.block_size, len(blocks), len(request.block_hashes))
        num_cached_blocks = self._num_cached_blocks.get(request.req_id, 0)
        if num_full_blocks <= num_cached_blocks:
            return
        self.block_pool.cache_full_blocks(request, blocks, num_full_blocks, num_cached_blocks)
        self._num_cached_blocks[request.req_id] = num_full_blocks

    def forget_hashes(self, req_id: str) -> None:
        """Take the request's gpu blocks out of the prefix cache (their contents are not trusted)."""
        for block in self._req_to_blocks.get(req_id, ()):
            if block is not None:
                self.block_pool._evict_hash(block)

    def free(self, request: KVRequest) -> None:
        """Release the request's blocks, tail first (so its tail is evicted before its prefix)."""
        blocks = self._req_to_blocks.pop(request.req_id, [])
        self._num_cached_blocks.pop(request.req_id, None)
        self.block_pool.free(block for block in reversed(blocks) if block is not None)

    def get_block_ids(self, request: KVRequest) -> list[int]:
        """The request's gpu block ids by logical index; -1 marks a block in a cold tier."""
        return [
            -1 if block is None else block.block_id for block in self._req_to_blocks.get(request.req_id, ())
        ]

    # ---- moves between tiers (driven by kv/tiers.py) -----------------------------------

    def get_blocks(self, req_id: str) -> Sequence[KVBlock | None]:
        """The request's block table (None: in a cold tier). Read only."""
        return self._req_to_blocks.get(req_id, ())

    def evict_block(self, req_ids: str | Sequence[str], logical_idx: int) -> int:
        """Take a block out of the gpu tier (its bytes are moving to a cold tier); returns its id.

        `req_ids`: the request holding it, or every request holding it (a shared prefix block
        leaves for all its holders at once). It drops its hash (the cold copy takes it in its
        tier) and goes to the tail of the free queue; the table entries become None.
        """
        holders = [req_ids] if isinstance(req_ids, str) else list(req_ids)
        block = self._req_to_blocks[holders[0]][logical_idx]
        if (
            block is None
            or block.ref_cnt != len(holders)
            or any(self._req_to_blocks[r][logical_idx] is not block for r in holders)
        ):
            raise ValueError(
                f"requests {holders}: block {logical_idx} is not a gpu block held by exactly them"
            )
        self.block_pool._evict_hash(block)
        for r in holders:
            self._req_to_blocks[r][logical_idx] = None
        self.block_pool.free([block] * len(holders))
        return block.block_id

    def load_block(self, req_id: str, logical_idx: int) -> int:
        """Give a cold table entry a fresh gpu block (its bytes are coming back); returns its id."""
        blocks = self._req_to_blocks[req_id]
        if blocks[logical_idx] is not None:
            raise ValueError(f"request {req_id}: block {logical_idx} is already in the gpu tier")
        (block,) = self.block_pool.allocate(1)
        blocks[logical_idx] = block
        return block.block_id

    def truncate(self, req_id: str, num_blocks: int) -> None:
        """Drop the table entries from `num_blocks` on, freeing their gpu blocks tail first."""
        blocks = self._req_to_blocks[req_id]
        tail = blocks[num_blocks:]
        del blocks[num_blocks:]
        self.block_pool.free(block for block in reversed(tail) if block is not None)
        num_cached = self._num_cached_blocks.get(req_id, 0)
        self._num_cached_blocks[req_id] = min(num_cached, num_blocks)

    def drop_blocks(self, req_id: str, start: int, stop: int) -> list[tuple[int, int]] | None:
        """Context shift (scheduler/context_shift.py): drop table entries [start, stop), freeing
        their blocks (their cached hashes stay valid for others), and make the entries from `stop` on
        writable in place: each leaves the prefix cache (its keys are about to turn), and one shared
        with another request is swapped for a fresh block (copy on write). Returns (old id, new id)
        per entry from `stop` on (equal ids: in place), or None when the pool lacks the free blocks
        for the copies (nothing changed). Gpu blocks only (no entry may be None)."""
        blocks = self._req_to_blocks[req_id]
        dropped, kept = blocks[start:stop], blocks[stop:]
        if any(b is None for b in blocks):
            raise ValueError(f"request {req_id}: a context shift needs every block in the gpu tier")
        num_copies = sum(1 for b in kept if b is not None and b.ref_cnt > 1)
        num_freed = sum(1 for b in dropped if b is not None and b.ref_cnt == 1)
        if num_copies > self.num_free_blocks + num_freed:
            return None
        del blocks[start:stop]
        self.block_pool.free(b for b in reversed(dropped) if b is not None)
        pairs = []
        for i, block in enumerate(kept, start=start):
            assert block is not None
            if block.ref_cnt > 1:
                (fresh,) = self.block_pool.allocate(1)
                self.block_pool.free([block])
                blocks[i] = fresh
                pairs.append((block.block_id, fresh.block_id))
            else:
                self.block_pool._evict_hash(block)
                pairs.append((block.block_id, block.block_id))
        self._num_cached_blocks[req_id] = min(self._num_cached_blocks.get(req_id, 0), start)
        return pairs

    def reset_prefix_cache(self) -> bool:
        return self.block_pool.reset_prefix_cache()
