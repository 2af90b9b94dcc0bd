"""Cache management by prefix: list, lookup, pin, unpin, move and clear (pure Python bookkeeping).

The operations behind `/v1/kv/prefixes|lookup|pin|unpin|move|clear` and `kvspill kv ...`, run on the
engine thread between steps (`engine/core.py`). The prefixes are `kv/prefix_index.py`'s; the
blocks are the tiers' (`kv/tiers.py`); a move only decides and records block moves (bytes only,
`req_id` None), which the engine hands the runner at once.

Invariants:
- Every operation checks its input first and raises before it changes anything: an unknown prefix
  (`UnknownPrefixError`, HTTP 404), a tier that does not exist (`InvalidParameterError`, 400),
  no room or a pin past the share (`KVConflictError`, 409, saying how much is free).
- A block is found where a prefix lookup finds it: the gpu copy, else the cpu one, else the disk
  one. A prefix's chain is walked only up to its first block that no tier caches (the rest could
  not be reused anyway).
- Blocks held by running requests (or by another prefix's pin, or pinned for the persist writer)
  never move and are never uncached: operations leave them where they are and count them
  (`num_blocks_in_use`).
- A pin takes one reference per block in its tier's pool (gpu: `BlockPool.touch`, cold:
  `ColdBlockPool.touch`), so nothing evicts, spills or demotes the block until unpin. Pinned blocks
  of a tier stay within `pin_share` of its blocks. Moving a pinned prefix to another tier copies
  it there: the pinned copies stay (a lookup takes the gpu copy first, then the cpu one).
- A move evicts other cached-free blocks of the destination LRU first (a gpu one may be demoted
  to the cpu tier, as for any gpu allocation) and drops the source copies from their tiers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvspill.errors import DiskTierIOError, InvalidParameterError
from kvspill.kv.cold_pool import ColdBlockPool
from kvspill.kv.prefix_index import PrefixEntry
from kvspill.kv.tiers import KVTierManager
from kvspill.prefix_records import KVConflictError, LookupResult, OpResult, PrefixInfo, UnknownPrefixError
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, TIER_NAMES, BlockMove


@dataclass(frozen=True)
class ChainBlock:
    """One block of a prefix's chain where a lookup finds it."""

    index: int
    block_hash: int
    tier: int
    block_id: int


class PrefixControl:
    """The cache operations over one `KVTierManager` (engine thread only)."""

    def __init__(
        self,
        tiers: KVTierManager,
        pin_share: float,
        is_persisted: Callable[[int], bool] | None = None,
        forget_persisted: Callable[[Sequence[int] | None], int] | None = None,
    ) -> None:
        self.tiers = tiers
        self.index = tiers.prefixes
        self.pin_share = pin_share
        self.block_size = tiers.block_size
        self.is_persisted = is_persisted  # None: no --kv-persist-dir
        # removes the files of these hashes (None: all of this engine's); returns how many
        self.forget_persisted = forget_persisted

    # ---- input -----------------------------------------------------------------------------

    def tier_of(self, name: str) -> int:
        """The tier named `name`; 400 for a name that is not a tier or a tier this server lacks."""
        if name not in TIER_NAMES:
            raise InvalidParameterError("tier", f"tier must be one of {', '.join(TIER_NAMES)}, got {name!r}")
        tier = TIER_NAMES.index(name)
        if tier != TIER_GPU and not self._pool(tier).num_blocks:
            flag = "--cpu-kv-budget" if tier == TIER_CPU else "--disk-kv-budget"
            raise InvalidParameterError("tier", f"this server has no {name} tier (start it with {flag})")
        return tier

    def entry(self, prefix_id: str) -> PrefixEntry:
        """The listed prefix; 404 when unknown or when no tier holds its first block any more."""
        entry = self.index.get(prefix_id)
        if entry is not None and entry.pinned_tier is None and self._locate(entry.hashes[0]) is None:
            self.index.remove(entry)  # evicted since: forgotten now
            entry = None
        if entry is None:
            raise UnknownPrefixError(f"no cached prefix {prefix_id!r}: `GET /v1/kv/prefixes` lists them")
        return entry

    # ---- queries ---------------------------------------------------------------------------

    def prefixes(self) -> list[PrefixInfo]:
        """Every listed prefix that a tier still holds the start of, most recently used first."""
        rows = []
        for entry in sorted(self.index.entries.values(), key=lambda e: e.last_use, reverse=True):
            chain = self.chain(entry.hashes)
            if not chain and entry.pinned_tier is None:
                continue
            ids: dict[str, list[int]] = {name: [] for name in TIER_NAMES}
            for block in chain:
                ids[TIER_NAMES[block.tier]].append(block.block_id)
            persisted = None
            if self.is_persisted is not None:
                persisted = all(self.is_persisted(h) for h in entry.hashes)
            pinned = None if entry.pinned_tier is None else TIER_NAMES[entry.pinned_tier]
            rows.append(
                PrefixInfo(
                    entry.prefix_id,
                    len(entry.hashes) * self.block_size,
                    len(chain) * self.block_size,
                    ids,
                    entry.hits,
                    entry.last_use,
                    pinned,
                    persisted,
                )  # fmt: skip
            )
        return rows

    def lookup(self, num_prompt_tokens: int, hashes: Sequence[int]) -> LookupResult:
        """`hashes`: the prompt's full-block hashes (as a request of it would have them)."""
        chain = self.chain(hashes)
        tokens = {name: 0 for name in TIER_NAMES}
        for block in chain:
            tokens[TIER_NAMES[block.tier]] += self.block_size
        persisted = None
        if self.is_persisted is not None:
            n = len(chain)
            while n < len(hashes) and self.is_persisted(hashes[n]):
                n += 1
            persisted = n * self.block_size
        entry = self.index.find_longest(hashes[: len(chain)] or hashes[:1])
        return LookupResult(num_prompt_tokens, tokens, persisted, entry.prefix_id if entry else None)

    def chain(self, hashes: Sequence[int]) -> list[ChainBlock]:
        """Where each leading block is found, up to the first that no tier holds."""
        found = []
        for i, block_hash in enumerate(hashes):
            where = self._locate(block_hash)
            if where is None:
                break
            found.append(ChainBlock(i, block_hash, *where))
        return found

    # ---- pins ------------------------------------------------------------------------------

    def pin(self, prefix_id: str, tier_name: str) -> OpResult:
        """Move the prefix to the tier (what can move) and keep it there until unpinned."""
        tier, entry = self.tier_of(tier_name), self.entry(prefix_id)
        if entry.pinned_tier is not None and entry.pinned_tier != tier:
            raise KVConflictError(
                f"prefix {entry.prefix_id} is pinned in the {TIER_NAMES[entry.pinned_tier]} tier: "
                "unpin it there first"
            )
        if entry.pinned_tier == tier:
            return self._result("pin", entry, tier, len(entry.pinned_blocks))
        chain = self.chain(entry.hashes)
        movable, in_use = self._split_movable(entry, chain, tier)
        self._check_pin_share(entry, tier, len(chain) - len(in_use))
        room = self._room(tier, chain)
        if len(movable) > room:
            self._no_room(entry, tier, len(movable), room)
        self._move_blocks(tier, chain, movable)
        return self._pin_resident(entry, tier, len(in_use))

    def unpin(self, prefix_id: str, tier_name: str) -> OpResult:
        tier, entry = self.tier_of(tier_name), self.entry(prefix_id)
        if entry.pinned_tier != tier:
            where = "nowhere" if entry.pinned_tier is None else f"in the {TIER_NAMES[entry.pinned_tier]} tier"
            raise KVConflictError(
                f"prefix {entry.prefix_id} is not pinned in the {tier_name} tier (pinned {where})"
            )
        num_blocks = self._drop_pin(entry)
        return self._result("unpin", entry, tier, num_blocks)

    def _check_pin_share(self, entry: PrefixEntry, tier: int, num_blocks: int) -> None:
        """409 when pinning `num_blocks` more blocks in `tier` would pass `pin_share` of it."""
        limit = int(self.pin_share * self._num_blocks(tier))
        already = len(entry.pinned_blocks) if entry.pinned_tier == tier else 0
        free = max(limit - self.index.num_pinned(tier) + already, 0)
        if num_blocks > free:
            name = TIER_NAMES[tier]
            raise KVConflictError(
                f"pinning prefix {entry.prefix_id} in the {name} tier needs {num_blocks} blocks "
                f"({num_blocks * self.block_size} tokens), but only {free} blocks ({free * self.block_size} "
                f"tokens) of the {name} tier's pin share are free (--kv-pin-share {self.pin_share} of "
                f"{self._num_blocks(tier)} blocks): unpin another prefix, or pin it in a larger tier"
            )

    def _pin_resident(self, entry: PrefixEntry, tier: int, num_in_use: int) -> OpResult:
        """Pin the prefix's leading blocks that are in `tier` now (blocks held elsewhere by running
        requests stay unpinned)."""
        resident = [b for b in self.chain(entry.hashes) if b.tier == tier]
        for block in resident:
            self._take_ref(tier, block.block_id)
        self.index.add_pin(entry, tier, [b.block_id for b in resident], [b.block_hash for b in resident])
        return self._result("pin", entry, tier, len(resident), num_in_use)

    def _drop_pin(self, entry: PrefixEntry) -> int:
        tier, block_ids = self.index.remove_pin(entry)
        for block_id in block_ids:
            self._drop_ref(tier, block_id)
        return len(block_ids)

    # ---- moves -----------------------------------------------------------------------------

    def move(self, prefix_id: str, tier_name: str, partial: bool = False) -> OpResult:
        """Move the prefix's cached blocks to the tier now. Blocks it pins in another tier are
        copied (the pin keeps them there). `partial`: move the leading blocks that fit instead of
        refusing when the tier lacks room for all."""
        tier, entry = self.tier_of(tier_name), self.entry(prefix_id)
        chain = self.chain(entry.hashes)
        movable, in_use = self._split_movable(entry, chain, tier)
        room = self._room(tier, chain)
        if len(movable) > room and not partial:
            self._no_room(entry, tier, len(movable), room)
        moved = self._move_blocks(tier, chain, movable[:room], entry)
        return self._result("move", entry, tier, moved, len(in_use))

    def _split_movable(
        self, entry: PrefixEntry, chain: list[ChainBlock], tier: int
    ) -> tuple[list[ChainBlock], list[ChainBlock]]:
        """(blocks outside `tier` that may move, blocks outside it held by others)."""
        movable: list[ChainBlock] = []
        in_use: list[ChainBlock] = []
        for block in chain:
            if block.tier == tier:
                continue
            own = 1 if entry.pinned_tier == block.tier and block.block_id in entry.pinned_blocks else 0
            (movable if self._ref_cnt(block.tier, block.block_id) == own else in_use).append(block)
        return movable, in_use

    def _room(self, tier: int, chain: list[ChainBlock]) -> int:
        """Blocks `tier` can take now: free and cached-free ones, less the prefix's own cached-free
        blocks there (they stay)."""
        own = sum(1 for b in chain if b.tier == tier and self._ref_cnt(tier, b.block_id) == 0)
        free = self.tiers.kv.num_free_blocks if tier == TIER_GPU else self._pool(tier).num_free_blocks
        return max(free - own, 0)

    def _no_room(self, entry: PrefixEntry, tier: int, num_blocks: int, room: int) -> None:
        name = TIER_NAMES[tier]
        raise KVConflictError(
            f"moving prefix {entry.prefix_id} to the {name} tier needs {num_blocks} free blocks "
            f"({num_blocks * self.block_size} tokens), but the {name} tier has {room} "
            f"({room * self.block_size} tokens; cached blocks of other prefixes count as free): "
            "move it with partial=true, or clear or unpin other prefixes"
        )

    def _move_blocks(
        self, tier: int, chain: list[ChainBlock], blocks: list[ChainBlock], entry: PrefixEntry | None = None
    ) -> int:
        """Copy `blocks` (of `chain`, room checked) into `tier` as cached-free blocks and drop their
        sources, except those `entry` pins (copied only); returns how many. The sources and the
        chain's cached-free blocks already in `tier` hold a reference meanwhile, so the
        destination's allocations (and the gpu's demotions to the cpu tier) never evict them."""
        kept = [b for b in chain if b.tier == tier and self._ref_cnt(tier, b.block_id) == 0]
        for block in [*blocks, *kept]:
            self._take_ref(block.tier, block.block_id)
        for block in blocks:
            dst_id = self._allocate(tier)
            self.tiers.record_move(block.tier, block.block_id, tier, dst_id)
            self._cache_free(tier, dst_id, block.block_hash)
        for block in kept:
            self._drop_ref(tier, block.block_id)
        pinned = set(entry.pinned_blocks) if entry is not None else set()
        for block in blocks:
            self._drop_ref(block.tier, block.block_id)
            if not (entry is not None and block.tier == entry.pinned_tier and block.block_id in pinned):
                self._uncache(block.tier, block.block_id)
        return len(blocks)

    def forget_failed_moves(self, moves: Sequence[BlockMove], error: DiskTierIOError) -> None:
        """The disk tier failed while a move ran: its blocks are retired as after a failed step, and
        a copy read from a failed disk block is uncached (its bytes are not the prefix's)."""
        self.tiers.prefix.on_disk_error(error)
        for m in moves:
            if m.src_tier == TIER_DISK and (error.broken or m.src_block_id in error.block_ids):
                self._uncache(m.dst_tier, m.dst_block_id)

    # ---- clear -----------------------------------------------------------------------------

    def clear(self, prefix_id: str | None, persisted: bool = False) -> OpResult:
        """Uncache one prefix's blocks in every tier (blocks it shares with other prefixes too), or
        every cached block (`prefix_id` None); unpins first. `persisted`: its --kv-persist-dir files
        too. Blocks held by running requests stay (they are cached again when those finish)."""
        if persisted and self.forget_persisted is None:
            raise InvalidParameterError(
                "persisted", "this server has no --kv-persist-dir: send persisted=false"
            )
        if prefix_id is None:
            return self._clear_all(persisted)
        entry = self.entry(prefix_id)
        if entry.pinned_tier is not None:
            self._drop_pin(entry)
        num_cleared = num_in_use = 0
        for block_hash in entry.hashes:
            for tier, block_id in self._copies(block_hash):
                if self._uncache(tier, block_id):
                    num_cleared += 1
                else:
                    num_in_use += 1
        files = self.forget_persisted(entry.hashes) if persisted and self.forget_persisted else 0
        self.index.remove(entry)
        return OpResult("clear", entry.prefix_id, None, num_cleared, num_in_use, files, self.block_size)

    def _clear_all(self, persisted: bool) -> OpResult:
        for entry in list(self.index.entries.values()):
            if entry.pinned_tier is not None:
                self._drop_pin(entry)
            self.index.remove(entry)
        pool = self.tiers.kv.block_pool
        num_cleared = sum(pool.uncache(block) for block in pool.blocks)
        num_in_use = pool.num_cached_blocks
        for cold in (self.tiers.cpu, self.tiers.disk):
            before = cold.num_cached_blocks
            cold.reset()
            num_cleared += before - cold.num_cached_blocks
            num_in_use += cold.num_cached_blocks
        files = self.forget_persisted(None) if persisted and self.forget_persisted else 0
        return OpResult("clear", None, None, num_cleared, num_in_use, files, self.block_size)

    # ---- one block in one tier -------------------------------------------------------------

    def _locate(self, block_hash: int) -> tuple[int, int] | None:
        block = self.tiers.kv.block_pool.get_cached_block(block_hash)
        if block is not None:
            return TIER_GPU, block.block_id
        return self.tiers.prefix.lookup(block_hash)

    def _copies(self, block_hash: int) -> list[tuple[int, int]]:
        """Every tier's copy of a block (a clear drops them all, not only the one a lookup finds)."""
        copies = []
        block = self.tiers.kv.block_pool.get_cached_block(block_hash)
        if block is not None:
            copies.append((TIER_GPU, block.block_id))
        for pool in (self.tiers.cpu, self.tiers.disk):
            block_id = pool.lookup(block_hash)
            if block_id is not None:
                copies.append((pool.tier, block_id))
        return copies

    def _pool(self, tier: int) -> ColdBlockPool:
        return self.tiers.cpu if tier == TIER_CPU else self.tiers.disk

    def _num_blocks(self, tier: int) -> int:
        return self.tiers.kv.num_blocks if tier == TIER_GPU else self._pool(tier).num_blocks

    def _ref_cnt(self, tier: int, block_id: int) -> int:
        if tier == TIER_GPU:
            return self.tiers.kv.block_pool.blocks[block_id].ref_cnt
        return self._pool(tier).ref_cnt(block_id)

    def _take_ref(self, tier: int, block_id: int) -> None:
        if tier == TIER_GPU:
            self.tiers.kv.block_pool.touch([self.tiers.kv.block_pool.blocks[block_id]])
        else:
            self._pool(tier).touch(block_id)

    def _drop_ref(self, tier: int, block_id: int) -> None:
        if tier == TIER_GPU:
            self.tiers.kv.block_pool.free([self.tiers.kv.block_pool.blocks[block_id]])
        else:
            self._pool(tier).free(block_id)

    def _allocate(self, tier: int) -> int:
        if tier == TIER_GPU:
            (block,) = self.tiers.kv.block_pool.allocate(1)
            return block.block_id
        return self._pool(tier).allocate()

    def _cache_free(self, tier: int, block_id: int, block_hash: int) -> None:
        """A just-allocated block now holds `block_hash`'s KV: cached, then free (most recent)."""
        if tier == TIER_GPU:
            pool = self.tiers.kv.block_pool
            pool.cache_loaded(pool.blocks[block_id], block_hash)
            return
        self._pool(tier).cache(block_id, block_hash)
        self._pool(tier).free(block_id)

    def _uncache(self, tier: int, block_id: int) -> bool:
        if tier == TIER_GPU:
            return self.tiers.kv.block_pool.uncache(self.tiers.kv.block_pool.blocks[block_id])
        return self._pool(tier).uncache(block_id)

    def _result(
        self, op: str, entry: PrefixEntry, tier: int, num_blocks: int, num_in_use: int = 0
    ) -> OpResult:
        return OpResult(op, entry.prefix_id, TIER_NAMES[tier], num_blocks, num_in_use, 0, self.block_size)
