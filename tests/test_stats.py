"""The KV stats records: `to_json()` is the `/v1/kv` body as served before the records existed
(keys, nesting, key order, ints vs floats), `from_json()` reads it back into the same record, and a
partial payload (an older server, a stand-in) reads with zeros where keys are missing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kvspill.stats import (
    ColdAttentionCounters,
    KVStats,
    KVTiers,
    RequestTierStats,
    RunnerKVStats,
    SchedulerStats,
    TierCounters,
    TierUsage,
    TransferCounters,
)


def _prefix(blocks: int, hit_tokens: int) -> dict[str, Any]:
    """A tier's prefix-cache keys (issue 14): 6144-byte blocks, 40 tokens looked up."""
    return {
        "prefix_blocks": blocks,
        "prefix_bytes": blocks * 6144,
        "prefix_hit_tokens": hit_tokens,
        "prefix_hit_rate": hit_tokens / 40,
    }


def _window(hot_window_tokens: int) -> dict[str, Any]:
    """A request's window keys (issue 52): one sink block, its hot window."""
    return {"hot_window_tokens": hot_window_tokens, "num_sink_blocks": 1}


# `engine.kv_stats()` of the release before the records (dicts built in engine/core.py), captured from
# the tiny Llama on the CPU: 12 gpu + 16 cpu + 32 disk blocks of 8 tokens, three requests
# mid-generation (timings rounded). The contract clients (monitor, status, bench --url) read.
TODAY: dict[str, Any] = {
    "block_size": 8,
    "block_bytes": 6144,
    "tiers": {
        "gpu": {"blocks": 12, "used_blocks": 12, "bytes": 73728, "used_bytes": 73728, **_prefix(3, 16)},
        "cpu": {"blocks": 16, "used_blocks": 16, "bytes": 98304, "used_bytes": 98304, **_prefix(1, 8)},
        "disk": {"blocks": 32, "used_blocks": 2, "bytes": 196608, "used_bytes": 12288, **_prefix(0, 0)},
    },
    "requests": {
        "req-0": {
            "status": "running",
            "num_gpu_blocks": 3,
            "num_cpu_blocks": 6,
            "num_disk_blocks": 1,
            **_window(16),
        },
        "req-1": {
            "status": "running",
            "num_gpu_blocks": 6,
            "num_cpu_blocks": 7,
            "num_disk_blocks": 1,
            **_window(40),
        },
        "req-2": {
            "status": "running",
            "num_gpu_blocks": 3,
            "num_cpu_blocks": 3,
            "num_disk_blocks": 0,
            **_window(16),
        },
    },
    "bytes_moved": {"cpu_to_disk": 12288, "gpu_to_cpu": 110592},
    "cold_attention_seconds": {"cpu": 0.4425, "stream": 0.0},
    "max_cold_fraction": 0.6,
    "scheduler": {
        "num_running": 3,
        "num_waiting": 0,
        "num_preemptions": 0,
        "kv_cache_usage": 1.0,
        "prefix_cache_queries": 0,
        "prefix_cache_hits": 0,
        "prefix_cache_hit_rate": 0.0,
        "num_gpu_blocks": 12,
        "num_used_gpu_blocks": 12,
        "num_cpu_blocks": 16,
        "num_used_cpu_blocks": 16,
        "num_disk_blocks": 32,
        "num_used_disk_blocks": 2,
        "kv_block_moves": {"gpu->cpu": 18, "cpu->disk": 2, "gpu->disk": 0, "cpu->gpu": 0, "disk->gpu": 0},
        "num_spilled_preemptions": 0,
        "num_dropped_spills": 0,
        "num_demoted_prefix_blocks": 0,
        "prefix_hit_tokens": {"gpu": 16, "cpu": 8, "disk": 0},
        "prefix_cached_blocks": {"gpu": 3, "cpu": 1, "disk": 0},
        "prefix_query_tokens": 40,
    },
    "runner": {
        "transfer_bytes_cpu_to_disk": 12288,
        "transfer_bytes_gpu_to_cpu": 110592,
        "transfer_num_moves": 20,
        "transfer_num_copies": 20,
        "transfer_num_plans": 10,
        "transfer_seconds": 0.001,
        "transfer_copy_seconds": 0.0,
        "cold_steps": 18,
        "cold_cpu_fraction": 1.0,
        "cold_cpu_bytes": 1480704,
        "cold_cpu_seconds": 0.4425,
        "cold_stream_bytes": 0,
        "cold_stream_seconds": 0.0,
        "cold_stream_copy_seconds": 0.0,
        "cold_stream_graph_bytes": 0,
        "cold_sparse_selected_blocks": 0,
        "cold_sparse_cold_blocks": 0,
        "cold_sparse_bytes": 0,
        "cold_sparse_seconds": 0.0,
        "cold_summary_bytes": 0,
    },
}


def test_todays_payload_round_trips_exactly():
    stats = KVStats.from_json(TODAY)
    # json.dumps compares key order and int vs float too (1 == 1.0 in Python, not in JSON).
    assert json.dumps(stats.to_json()) == json.dumps(TODAY)
    assert KVStats.from_json(stats.to_json()) == stats


def test_the_payload_reads_into_typed_fields():
    stats = KVStats.from_json(TODAY)
    assert stats.tiers.disk == TierUsage(blocks=32, used_blocks=2, total_bytes=196608, used_bytes=12288)
    assert stats.tiers.gpu.usage == 1.0
    assert [name for name, _ in stats.tiers.items()] == ["gpu", "cpu", "disk"]
    assert stats.requests["req-1"] == RequestTierStats(
        "running", 6, 7, 1, hot_window_tokens=40, num_sink_blocks=1
    )
    assert stats.total_bytes_moved == 12288 + 110592
    assert stats.cold_attention_seconds.cpu == 0.4425
    assert stats.scheduler is not None and stats.scheduler.num_running == 3
    assert stats.scheduler.kv_tiers.kv_block_moves["gpu->cpu"] == 18
    runner = stats.runner
    assert runner.transfer is not None and runner.transfer.num_plans == 10
    assert runner.transfer.bytes_by_direction == stats.bytes_moved
    assert runner.cold is not None and runner.cold.num_steps == 18 and runner.cold.cpu_fraction == 1.0
    assert runner.cold_attention_seconds == stats.cold_attention_seconds


def test_records_built_by_the_layers_serialize_as_today():
    """What the engine builds from the scheduler's and runner's records equals the captured JSON."""
    sched = SchedulerStats.from_json(TODAY["scheduler"])
    runner = RunnerKVStats(
        transfer=TransferCounters({"gpu_to_cpu": 110592, "cpu_to_disk": 12288}, 20, 20, 10, 0.001, 0.0),
        cold=ColdAttentionCounters(18, 1.0, 1480704, 0.4425, 0, 0.0, 0.0),
    )
    assert runner.to_json() == TODAY["runner"] and list(runner.to_json()) == list(TODAY["runner"])
    assert sched.to_json() == TODAY["scheduler"] and list(sched.to_json()) == list(TODAY["scheduler"])
    assert isinstance(sched.kv_tiers, TierCounters) and sched.kv_tiers.num_used_disk_blocks == 2
    # the tiers' usage, prefix-cache bytes and hit rates per tier included, from the counters alone
    assert KVTiers.of(sched.kv_tiers, TODAY["block_bytes"]).to_json() == TODAY["tiers"]


def test_snapshot_age_is_only_in_snapshots():
    stats = KVStats.from_json(TODAY)
    assert "snapshot_age_s" not in stats.to_json()
    aged = copy.deepcopy(TODAY) | {"snapshot_age_s": 0.3}
    assert KVStats.from_json(aged).snapshot_age_s == 0.3
    assert KVStats.from_json(aged).to_json() == aged


def test_a_partial_payload_reads_with_zeros():
    stats = KVStats.from_json(
        {
            "tiers": {"gpu": {"blocks": 8, "used_blocks": 2.0}},
            "requests": {"a": {}},
            "bytes_moved": {"gpu_to_cpu": 10},
        }
    )
    assert stats.tiers.gpu == TierUsage(blocks=8, used_blocks=2) and stats.tiers.cpu == TierUsage()
    assert isinstance(stats.tiers.gpu.used_blocks, int)
    assert stats.requests == {"a": RequestTierStats()} and stats.total_bytes_moved == 10
    assert stats.scheduler is None  # absent, not an empty queue: the monitor then asks /metrics
    assert stats.runner == RunnerKVStats() and stats.runner.to_json() == {}
    assert stats.cold_attention_seconds.to_json() == {"cpu": 0.0, "stream": 0.0}


def test_a_payload_that_is_not_an_object_is_refused():
    with pytest.raises(TypeError):
        KVStats.from_json([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        KVStats.from_json({"block_size": "many"})
