"""The counters of the tier manager (`kv/tiers.py`) as `kvspill.stats` records: what `/v1/kv`,
`/metrics` and the monitor show. Read-only views of the manager's state, kept here so the
manager's file holds its placement policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvspill.kv.block_pool import KVRequest
from kvspill.stats import RequestTierStats, TierCounters
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, TIER_NAMES

if TYPE_CHECKING:
    from kvspill.kv.tiers import KVTierManager

# Every direction a block moves in, as named in `TierCounters.kv_block_moves` (kvspill/stats.py).
_DIRECTIONS = (
    (TIER_GPU, TIER_CPU),
    (TIER_CPU, TIER_DISK),
    (TIER_GPU, TIER_DISK),
    (TIER_CPU, TIER_GPU),
    (TIER_DISK, TIER_GPU),
)
MOVE_NAMES = {(src, dst): f"{TIER_NAMES[src]}->{TIER_NAMES[dst]}" for src, dst in _DIRECTIONS}


def tier_counters(m: KVTierManager) -> TierCounters:
    """Totals of the manager: blocks per tier, moves, prefix hits, parked preemptions."""
    kv = m.kv
    return TierCounters(
        num_gpu_blocks=kv.num_blocks,
        num_used_gpu_blocks=kv.num_blocks - kv.num_free_blocks,
        num_cpu_blocks=m.cpu.num_blocks,
        num_used_cpu_blocks=m.cpu.num_used_blocks,
        num_disk_blocks=m.disk.num_blocks,
        num_used_disk_blocks=m.disk.num_used_blocks,
        kv_block_moves={name: m.num_moves[key] for key, name in MOVE_NAMES.items()},
        prefix_hit_tokens={TIER_NAMES[t]: m.prefix.hit_tokens[t] for t in (TIER_GPU, TIER_CPU, TIER_DISK)},
        prefix_query_tokens=kv.prefix_cache_queries,
        prefix_cached_blocks={
            TIER_NAMES[TIER_GPU]: kv.block_pool.num_cached_blocks,
            TIER_NAMES[TIER_CPU]: m.cpu.num_cached_blocks,
            TIER_NAMES[TIER_DISK]: m.disk.num_cached_blocks,
        },
        num_spilled_preemptions=m.num_parked,
        num_dropped_spills=m.num_parked_dropped,
        num_demoted_prefix_blocks=m.num_demoted,
    )


def request_tier_stats(
    m: KVTierManager, request: KVRequest, cpu_blocks: int, disk_blocks: int
) -> RequestTierStats:
    """Where one request's blocks are (`cpu_blocks`/`disk_blocks`: its cold blocks per tier)."""
    return RequestTierStats(
        status="preempted" if m.is_parked(request) else "running",
        num_gpu_blocks=sum(block is not None for block in m.kv.get_blocks(request.req_id)),
        num_cpu_blocks=cpu_blocks,
        num_disk_blocks=disk_blocks,
    )
