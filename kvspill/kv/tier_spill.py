"""Which gpu blocks leave when the gpu tier is short: the spill candidates of `kv/tiers.py`
(pure Python; `KVTierManager` inherits `SpillPicker`). The rules are in `kv/tiers.py`'s module doc.

Each request's blocks are judged by its own `KVWindow` (its sink blocks and hot window): the
request's own when it asked for one (`windows`, keyed by req_id, live from the scheduler), else the
server's (`window`). A shared prefix block leaves only when eligible under every holder's window.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from kvspill.kv.block_pool import KVBlock, KVCacheManager, KVRequest


@dataclass(frozen=True)
class KVWindow:
    """The blocks of one request that stay on the gpu tier: its first `num_sink_blocks` blocks and
    those holding any of its last `hot_window_tokens` computed tokens."""

    num_sink_blocks: int
    hot_window_tokens: int

    def limit(self, num_computed_tokens: int, block_size: int) -> int:
        """The first logical index at or past the hot window (may be negative: nothing eligible)."""
        return (num_computed_tokens - self.hot_window_tokens) // block_size

    def is_eligible(self, num_computed_tokens: int, logical_idx: int, block_size: int) -> bool:
        return self.num_sink_blocks <= logical_idx < self.limit(num_computed_tokens, block_size)


@dataclass(frozen=True)
class Admission:
    """The request being admitted, for `_pick_spills`: its gpu prefix hits (block id -> logical
    idx) and `limit`, its first block index not eligible to spill once admitted."""

    hits: dict[int, int]
    limit: int

    @classmethod
    def of(
        cls, request: KVRequest, new_computed_blocks: Sequence[KVBlock | None], tiers: SpillPicker
    ) -> Admission | None:
        hits = {b.block_id: i for i, b in enumerate(new_computed_blocks) if b is not None}
        if not hits:
            return None
        num_computed = request.num_computed_tokens + len(new_computed_blocks) * tiers.block_size
        return cls(hits, tiers.window_of(request.req_id).limit(num_computed, tiers.block_size))


class SpillPicker:
    """Spill candidates over the tier manager's state (the attributes below are its own)."""

    kv: KVCacheManager
    block_size: int
    window: KVWindow  # the server's (--num-sink-blocks, --hot-window-tokens)
    _windows: Mapping[str, KVWindow]  # req_id -> the request's own, when it asked for one
    _arrival_seq: Mapping[str, int]
    _requests: dict[str, KVRequest]
    _spill_cursor: dict[str, int]

    def window_of(self, req_id: str) -> KVWindow:
        """The request's own window, else the server's."""
        return self._windows.get(req_id, self.window)

    def _is_eligible(self, req_id: str, num_computed_tokens: int, logical_idx: int) -> bool:
        return self.window_of(req_id).is_eligible(num_computed_tokens, logical_idx, self.block_size)

    def _spill_candidates(self) -> Iterator[tuple[int, int, str]]:
        """Gpu blocks past the sinks and below the hot window of every request holding gpu blocks,
        as (logical idx, arrival seq, req_id), oldest first (a shared block once per holder)."""
        per_request = [self._eligible_gpu_blocks(req_id) for req_id in self._requests]
        return heapq.merge(*per_request)

    def _eligible_gpu_blocks(self, req_id: str) -> Iterator[tuple[int, int, str]]:
        request, seq = self._requests[req_id], self._arrival_seq[req_id]
        blocks = self.kv.get_blocks(req_id)
        window = self.window_of(req_id)
        limit = min(window.limit(request.num_computed_tokens, self.block_size), len(blocks))
        i = max(self._spill_cursor.get(req_id, 0), window.num_sink_blocks)
        while i < limit and blocks[i] is None:
            i += 1
        self._spill_cursor[req_id] = i
        for j in range(i, limit):
            if blocks[j] is not None:
                yield j, seq, req_id

    def _pick_spills(self, num_blocks: int, admission: Admission | None) -> list[tuple[int, list[str], bool]]:
        """Up to `num_blocks` gpu blocks to spill, oldest first, as (logical idx, holders, joins).

        A block held by one request is eligible when past its sinks and below its hot window; a
        shared prefix block when that holds for every holder (each by its own window), and it
        leaves for all of them at once. `joins`: the block is also a gpu hit of the request being
        admitted, eligible for it too, which then takes the cold copy as a cold hit. Without this a
        wave of requests on one long prefix waits: the gpu tier is full of the prefix, the first
        request holds it and the others' hits are the only blocks left to spill.
        """
        picks: list[tuple[int, list[str], bool]] = []
        seen: set[int] = set()
        for i, _, req_id in self._spill_candidates():
            if len(picks) == num_blocks:
                break
            block = self.kv.get_blocks(req_id)[i]
            assert block is not None
            if block.block_id in seen:  # a shared block, met again through another holder
                continue
            seen.add(block.block_id)
            joins = admission is not None and admission.hits.get(block.block_id) == i
            if block.ref_cnt == 1 and not joins:
                picks.append((i, [req_id], False))
                continue
            holders = self._holders(block, i)
            if (
                len(holders) == block.ref_cnt
                and all(self._is_eligible(h, self._requests[h].num_computed_tokens, i) for h in holders)
                and (not joins or (admission is not None and i < admission.limit))
            ):
                picks.append((i, holders, joins))
        return picks

    def _holders(self, block: KVBlock, logical_idx: int) -> list[str]:
        """The requests whose table has `block` at `logical_idx`, in arrival order (a prefix block
        sits at the same index in every table that shares it)."""
        holders = []
        for req_id in self._requests:
            blocks = self.kv.get_blocks(req_id)
            if logical_idx < len(blocks) and blocks[logical_idx] is block:
                holders.append(req_id)
        return sorted(holders, key=self._arrival_seq.__getitem__)
