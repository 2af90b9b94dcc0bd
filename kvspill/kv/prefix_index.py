"""The cached prefixes a user can name: chains of block hashes, their hits and their pins (pure Python).

The tiers' prefix caches know blocks, not prefixes: a block's chained hash names the whole prefix
up to it (`scheduler/request.py: hash_block_tokens`), but no block knows where its chain goes on.
This index remembers the chains that requests left in the caches, so `kvspill kv ls` and the
`/v1/kv/*` routes (`kv/prefix_control.py`) can list, pin, move and clear them by name.

Invariants:
- A prefix is named by its last block's hash (16 hex digits, `prefix_id`); its chain is the hashes
  of its full blocks, in order. Two prefixes may share leading blocks (a system prompt).
- Chains are recorded when a request frees its blocks (`record`): the blocks it had computed. A
  chain that only extends an entry nobody used (no hit, no pin) replaces it, so a prompt followed
  by its answer is one entry; one that is a leading part of an entry already listed adds nothing.
- `hits` counts admissions that took cached blocks of the prefix: a hit covering the whole prefix,
  or covering part of it (the hit's last block is in its chain).
- Pins are references on blocks held by this index (`pin_refs`, tier -> block id -> count); the
  tier's pool holds the same references, so a pinned block is never evicted. `pinned_gpu_hashes`
  lets the scheduler count pinned gpu blocks as no room for a request that does not hold them.
- At most `max_entries` entries; past it, entries whose first block no tier caches go first, then
  the least recently used unpinned ones.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

MAX_ENTRIES = 4096


def prefix_id_of(block_hash: int) -> str:
    """The name of the prefix ending with this block (its hash, as the persist dir names files)."""
    return f"{block_hash:016x}"


@dataclass
class PrefixEntry:
    """One named prefix: its chain of block hashes, usage and pin."""

    hashes: tuple[int, ...]
    last_use: float  # wall-clock seconds (time.time()) of its recording or latest hit
    hits: int = 0
    pinned_tier: int | None = None
    pinned_blocks: list[int] = field(default_factory=list)  # block ids in `pinned_tier`, chain order

    @property
    def prefix_id(self) -> str:
        return prefix_id_of(self.hashes[-1])


class PrefixIndex:
    def __init__(self, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self.entries: dict[str, PrefixEntry] = {}
        self._by_hash: dict[int, set[str]] = {}  # block hash -> ids of the entries whose chain has it
        self.pin_refs: dict[int, Counter[int]] = {
            TIER_GPU: Counter(),
            TIER_CPU: Counter(),
            TIER_DISK: Counter(),
        }
        self.pinned_gpu_hashes: Counter[int] = Counter()

    def get(self, prefix_id: str) -> PrefixEntry | None:
        return self.entries.get(prefix_id.lower())

    def num_pinned(self, tier: int) -> int:
        """Distinct blocks of `tier` some prefix pins."""
        return len(self.pin_refs[tier])

    def record(self, hashes: Sequence[int], is_cached: Callable[[int], bool]) -> None:
        """A request's computed chain entered the caches (see the module doc for what is kept)."""
        if not hashes:
            return
        now = self.clock()
        key = prefix_id_of(hashes[-1])
        if key in self.entries or hashes[-1] in self._by_hash:  # listed, or a leading part of an entry
            for entry_id in self._by_hash.get(hashes[-1], ()):
                self.entries[entry_id].last_use = now
            return
        for h in hashes[:-1]:  # an unused entry this chain extends goes: one entry per conversation
            old = self.entries.get(prefix_id_of(h))
            if old is not None and old.hashes[-1] == h and not old.hits and old.pinned_tier is None:
                self._drop(old)
        entry = PrefixEntry(tuple(hashes), now)
        self.entries[key] = entry
        for h in entry.hashes:
            self._by_hash.setdefault(h, set()).add(key)
        if len(self.entries) > self.max_entries:
            self._prune(is_cached)

    def note_hit(self, hashes: Sequence[int]) -> None:
        """An admission took `hashes` (the leading blocks of its prompt) from the caches: the entries
        holding its last block (chained hashes: they start with the same blocks) and the entries
        it covers whole (their last block is among `hashes`)."""
        if not hashes:
            return
        now = self.clock()
        hit = set(self._by_hash.get(hashes[-1], ()))
        hit.update(key for key in map(prefix_id_of, hashes) if key in self.entries)
        for entry_id in hit:
            entry = self.entries[entry_id]
            entry.hits += 1
            entry.last_use = now

    def find_longest(self, hashes: Sequence[int]) -> PrefixEntry | None:
        """The listed prefix that is the longest leading part of `hashes`, else one that `hashes`
        is a leading part of (for `lookup`: a name to pin or move)."""
        for h in reversed(hashes):
            entry = self.entries.get(prefix_id_of(h))
            if entry is not None and entry.hashes[-1] == h:
                return entry
        if hashes:
            ids = sorted(self._by_hash.get(hashes[-1], ()))
            return self.entries[ids[0]] if ids else None
        return None

    def add_pin(self, entry: PrefixEntry, tier: int, block_ids: Sequence[int], hashes: Sequence[int]) -> None:
        entry.pinned_tier, entry.pinned_blocks = tier, list(block_ids)
        self.pin_refs[tier].update(block_ids)
        if tier == TIER_GPU:
            self.pinned_gpu_hashes.update(hashes)

    def remove_pin(self, entry: PrefixEntry) -> tuple[int, list[int]]:
        """Forget the entry's pin; returns (tier, block ids) whose references the caller drops."""
        tier, block_ids = entry.pinned_tier, entry.pinned_blocks
        assert tier is not None, "remove_pin of an unpinned prefix"
        refs = self.pin_refs[tier]
        refs.subtract(block_ids)
        for block_id in block_ids:
            if refs[block_id] <= 0:
                del refs[block_id]
        if tier == TIER_GPU:
            self.pinned_gpu_hashes.subtract(entry.hashes[: len(block_ids)])
            self.pinned_gpu_hashes += Counter()  # drops the zero counts
        entry.pinned_tier, entry.pinned_blocks = None, []
        return tier, block_ids

    def remove(self, entry: PrefixEntry) -> None:
        """Drop an unpinned entry."""
        assert entry.pinned_tier is None, "unpin before removing"
        self._drop(entry)

    def _drop(self, entry: PrefixEntry) -> None:
        key = entry.prefix_id
        del self.entries[key]
        for h in entry.hashes:
            ids = self._by_hash.get(h)
            if ids is not None:
                ids.discard(key)
                if not ids:
                    del self._by_hash[h]

    def _prune(self, is_cached: Callable[[int], bool]) -> None:
        unpinned = [e for e in self.entries.values() if e.pinned_tier is None]
        gone = {e.prefix_id for e in unpinned if not is_cached(e.hashes[0])}
        for entry in unpinned:
            if entry.prefix_id in gone:
                self._drop(entry)
        excess = len(self.entries) - self.max_entries
        if excess > 0:
            left = [e for e in unpinned if e.prefix_id not in gone]
            oldest = sorted(left, key=lambda e: e.last_use)[:excess]
            for entry in oldest:
                self._drop(entry)
