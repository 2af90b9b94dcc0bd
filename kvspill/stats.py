"""KV statistics as typed records: what `LLMEngine.kv_stats()` returns and `GET /v1/kv` serves.

Each layer reports its own record, and the engine puts them together:
- the scheduler: `SchedulerStats` (queue, prefix cache, and the tiers' bookkeeping
  `TierCounters`) and one `RequestTierStats` per request holding KV;
- the runner: `RunnerKVStats`, the bytes and seconds of data movement (`TransferCounters`,
  `storage/transfer.py`) and of cold attention (`ColdAttentionCounters`, `attention/cold/dispatch.py`);
- the engine: `KVStats`, both of the above plus blocks and bytes per tier (`TierUsage`).

Invariants:
- Torch-free and frozen: a record is a snapshot of counters since start (totals, never rates;
  a reader that wants a rate differences two snapshots).
- `KVStats.to_json()` is the `/v1/kv` body key for key (names, nesting, ints as ints, floats as
  floats): `kvspill monitor --url`, `kvspill status` and `kvspill bench --url` read it, and a
  client of an older release must keep working. Renaming a field keeps its JSON name in `to_json`.
- `from_json()` is lenient: a missing key reads as zero or empty (an older server, or a stand-in
  that sends part of the payload); only `KVStats.scheduler` reads as None when absent, so a client
  can tell "no queue figures" (ask /metrics) from "an empty queue".

Units: blocks are KV blocks (`block_size` tokens of every layer, K and V); bytes are bytes;
seconds are wall seconds summed since start. Directions of block moves are named two ways, as
they always were: "gpu->cpu" for block counts (scheduler), "gpu_to_cpu" for bytes (runner).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from kvspill.types import TIER_NAMES

Json = dict[str, Any]


def _obj(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """`raw[key]` when it is a JSON object, else an empty one."""
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def _counts(raw: Mapping[str, Any]) -> dict[str, int]:
    return {str(k): int(v) for k, v in raw.items()}


def _scalars_to_json(record: Any, prefix: str = "", renamed: Mapping[str, str] | None = None) -> Json:
    """The int/float/str fields of `record` in field order, named `prefix + name` (or `renamed`)."""
    renamed = renamed or {}
    return {
        renamed.get(f.name, prefix + f.name): getattr(record, f.name)
        for f in fields(record)
        if isinstance(f.default, int | float | str)
    }


def _scalars_from_json(
    cls: Any, raw: Mapping[str, Any], prefix: str = "", renamed: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The int/float/str fields of `cls` from `raw`, each coerced to its default's type (8.0 in
    the JSON reads as 8 for an int field, so `to_json` writes an int again); missing: the default."""
    renamed = renamed or {}
    out: dict[str, Any] = {}
    for f in fields(cls):
        if isinstance(f.default, int | float | str):
            value = raw.get(renamed.get(f.name, prefix + f.name))
            out[f.name] = f.default if value is None else type(f.default)(value)
    return out


# ---- scheduler side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TierCounters:
    """The tiers' bookkeeping (`KVTierManager.stats()`): blocks per tier, moves since start."""

    num_gpu_blocks: int = 0  # per tier: blocks in all (0: no such tier) ...
    num_used_gpu_blocks: int = 0  # ... and blocks held by requests (running or parked)
    num_cpu_blocks: int = 0
    num_used_cpu_blocks: int = 0
    num_disk_blocks: int = 0
    num_used_disk_blocks: int = 0
    # "gpu->cpu", "cpu->disk", "gpu->disk", "cpu->gpu", "disk->gpu" (kv/tiers.MOVE_NAMES) -> blocks
    kv_block_moves: Mapping[str, int] = field(default_factory=dict)
    num_spilled_preemptions: int = 0  # preemptions that parked the KV instead of recomputing it
    num_dropped_spills: int = 0  # parked requests whose KV was dropped for room (recomputed instead)
    num_demoted_prefix_blocks: int = 0  # cached gpu blocks copied to the cpu tier's cache when reused
    # Prefix cache per tier ("gpu", "cpu", "disk"): tokens found there at admission since start,
    # and blocks findable by prefix hash now (in use or cached-free).
    prefix_hit_tokens: Mapping[str, int] = field(default_factory=dict)
    prefix_cached_blocks: Mapping[str, int] = field(default_factory=dict)
    prefix_query_tokens: int = 0  # tokens looked up at admission since start (hit rate's denominator)

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TierCounters:
        return cls(
            **_scalars_from_json(cls, raw),
            kv_block_moves=_counts(_obj(raw, "kv_block_moves")),
            prefix_hit_tokens=_counts(_obj(raw, "prefix_hit_tokens")),
            prefix_cached_blocks=_counts(_obj(raw, "prefix_cached_blocks")),
        )


@dataclass(frozen=True)
class SchedulerStats:
    """The scheduler's counters (`Scheduler.stats()`); `/v1/kv` `scheduler`, one flat object with
    the tier counters' keys after these."""

    num_running: int = 0
    num_waiting: int = 0
    num_preemptions: int = 0  # since start
    kv_cache_usage: float = 0.0  # fraction of gpu blocks held by requests
    prefix_cache_queries: int = 0  # tokens looked up at admission
    prefix_cache_hits: int = 0  # tokens found in the prefix cache
    prefix_cache_hit_rate: float = 0.0
    kv_tiers: TierCounters = field(default_factory=TierCounters)

    def to_json(self) -> Json:
        return {**_scalars_to_json(self), **self.kv_tiers.to_json()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SchedulerStats:
        return cls(**_scalars_from_json(cls, raw), kv_tiers=TierCounters.from_json(raw))


@dataclass(frozen=True)
class RequestTierStats:
    """Where one request's KV lives (`Scheduler.tier_stats()`, `/v1/kv` `requests.<req_id>`)."""

    status: str = ""  # "running", or "preempted": its KV is parked in the cold tiers
    num_gpu_blocks: int = 0
    num_cpu_blocks: int = 0
    num_disk_blocks: int = 0
    # its window on the gpu tier: the request's own (request fields of the same names), else the
    # server's --hot-window-tokens and --num-sink-blocks
    hot_window_tokens: int = 0
    num_sink_blocks: int = 0

    def to_json(self) -> Json:
        return _scalars_to_json(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RequestTierStats:
        return cls(**_scalars_from_json(cls, raw))


# ---- runner side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransferCounters:
    """Block copies between tiers since start (`KVTransferEngine.counters()`). JSON: flat keys
    `transfer_bytes_<direction>` (directions that moved, sorted), then `transfer_<field>`."""

    bytes_by_direction: Mapping[str, int] = field(default_factory=dict)  # "gpu_to_cpu", ... -> bytes
    num_moves: int = 0  # block moves
    num_copies: int = 0  # slice copies: runs of consecutive ids go as one
    num_plans: int = 0  # non-empty transfer plans executed
    seconds: float = 0.0  # host wall time inside `execute`
    copy_seconds: float = 0.0  # CUDA: measured stream time of the async gpu<->cpu copies (0 elsewhere)

    def to_json(self) -> Json:
        moved = {f"transfer_bytes_{k}": v for k, v in sorted(self.bytes_by_direction.items())}
        return {**moved, **_scalars_to_json(self, "transfer_")}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TransferCounters:
        prefix = "transfer_bytes_"
        moved = {k.removeprefix(prefix): int(v) for k, v in raw.items() if k.startswith(prefix)}
        return cls(moved, **_scalars_from_json(cls, raw, "transfer_"))


@dataclass(frozen=True)
class ColdAttentionCounters:
    """Attention over cold (cpu/disk) blocks since start (`ColdAttentionBackend.counters()`).
    Bytes are KV bytes attended per layer, summed over layers. JSON: flat keys `cold_<field>`."""

    num_steps: int = 0  # steps with a cold block (JSON `cold_steps`)
    cpu_fraction: float = 0.0  # share of cold blocks the CPU attends: 1 "cpu", 0 "stream", else "split"
    cpu_bytes: int = 0
    cpu_seconds: float = 0.0  # wall time of the CPU partials once q is on the host, summed over workers
    stream_bytes: int = 0  # bytes staged and copied to the device
    stream_seconds: float = 0.0  # host wall time of the stream path (all of it off CUDA)
    stream_copy_seconds: float = 0.0  # CUDA: measured H2D time of the staged chunks
    stream_graph_bytes: int = 0  # of stream_bytes: those of CUDA-graphed steps (not in the copy time)
    # --cold-attention sparse, summed over layers and decode rows: blocks attended out of the
    # cold blocks those rows had (the budget at work), their KV bytes, host wall time
    sparse_selected_blocks: int = 0
    sparse_cold_blocks: int = 0
    sparse_bytes: int = 0
    sparse_seconds: float = 0.0
    summary_bytes: int = 0  # device memory of the cold blocks' key summaries

    _RENAMED = {"num_steps": "cold_steps"}

    def to_json(self) -> Json:
        return _scalars_to_json(self, "cold_", self._RENAMED)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ColdAttentionCounters:
        return cls(**_scalars_from_json(cls, raw, "cold_", cls._RENAMED))


@dataclass(frozen=True)
class ColdAttentionSeconds:
    """Seconds in cold attention per path (`/v1/kv` `cold_attention_seconds`)."""

    cpu: float = 0.0
    stream: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {"cpu": self.cpu, "stream": self.stream}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ColdAttentionSeconds:
        return cls(**_scalars_from_json(cls, raw))


@dataclass(frozen=True)
class RunnerKVStats:
    """The runner's KV counters (`ModelRunner.kv_stats()`); `/v1/kv` `runner`, one flat object
    (empty for a runner whose storage has no cold tiers)."""

    transfer: TransferCounters | None = None  # None: no transfer engine (storage without cold tiers)
    cold: ColdAttentionCounters | None = None  # None: no cold-attention backend
    # The disk tier's failed reads and writes since start (storage/disk_pool.py); JSON `disk_<field>`
    disk_read_errors: int = 0
    disk_write_errors: int = 0

    @property
    def bytes_moved(self) -> Mapping[str, int]:
        """Bytes moved per direction ("gpu_to_cpu", ...) since start."""
        return self.transfer.bytes_by_direction if self.transfer is not None else {}

    @property
    def total_bytes_moved(self) -> int:
        return sum(self.bytes_moved.values())

    @property
    def cold_attention_seconds(self) -> ColdAttentionSeconds:
        if self.cold is None:
            return ColdAttentionSeconds()
        return ColdAttentionSeconds(cpu=self.cold.cpu_seconds, stream=self.cold.stream_seconds)

    def to_json(self) -> Json:
        out: Json = {}
        if self.transfer is not None:
            out.update(self.transfer.to_json())
        if self.cold is not None:
            out.update(self.cold.to_json())
        if self.disk_read_errors or self.disk_write_errors:
            out.update(disk_read_errors=self.disk_read_errors, disk_write_errors=self.disk_write_errors)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunnerKVStats:
        has = {p: any(str(k).startswith(p) for k in raw) for p in ("transfer_", "cold_")}
        return cls(
            transfer=TransferCounters.from_json(raw) if has["transfer_"] else None,
            cold=ColdAttentionCounters.from_json(raw) if has["cold_"] else None,
            disk_read_errors=int(raw.get("disk_read_errors", 0)),
            disk_write_errors=int(raw.get("disk_write_errors", 0)),
        )


# ---- the engine's record -------------------------------------------------------------------------


@dataclass(frozen=True)
class TierUsage:
    """Blocks and bytes of one KV tier (`/v1/kv` `tiers.<gpu|cpu|disk>`)."""

    blocks: int = 0  # blocks in all (0: no such tier)
    used_blocks: int = 0  # blocks held by requests (running or parked)
    total_bytes: int = 0  # blocks x block_bytes (JSON `bytes`)
    used_bytes: int = 0
    # Prefix cache: blocks findable by prefix hash now (and their bytes), prompt tokens found in
    # this tier at admission since start, and that over all tokens looked up.
    prefix_blocks: int = 0
    prefix_bytes: int = 0
    prefix_hit_tokens: int = 0
    prefix_hit_rate: float = 0.0

    @property
    def usage(self) -> float:
        """Fraction of the tier's blocks in use; 0 for a tier without blocks."""
        return self.used_blocks / self.blocks if self.blocks else 0.0

    @classmethod
    def of(cls, blocks: int, used_blocks: int, block_bytes: int) -> TierUsage:
        return cls(blocks, used_blocks, blocks * block_bytes, used_blocks * block_bytes)

    def with_prefix(self, name: str, counters: TierCounters, block_bytes: int) -> TierUsage:
        """This usage plus tier `name`'s prefix-cache figures from the tiers' counters."""
        cached, hits = counters.prefix_cached_blocks.get(name, 0), counters.prefix_hit_tokens.get(name, 0)
        rate = hits / counters.prefix_query_tokens if counters.prefix_query_tokens else 0.0
        return replace(self, prefix_blocks=cached, prefix_bytes=cached * block_bytes, prefix_hit_tokens=hits,
                       prefix_hit_rate=round(rate, 4))  # fmt: skip

    def to_json(self) -> Json:
        return _scalars_to_json(self, renamed={"total_bytes": "bytes"})

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TierUsage:
        return cls(**_scalars_from_json(cls, raw, renamed={"total_bytes": "bytes"}))


@dataclass(frozen=True)
class KVTiers:
    """`TierUsage` of each tier; the JSON object always names all three (`types.TIER_NAMES`)."""

    gpu: TierUsage = field(default_factory=TierUsage)
    cpu: TierUsage = field(default_factory=TierUsage)
    disk: TierUsage = field(default_factory=TierUsage)

    def items(self) -> tuple[tuple[str, TierUsage], ...]:
        """(name, usage) in tier order: gpu, cpu, disk."""
        return tuple((name, getattr(self, name)) for name in TIER_NAMES)

    @classmethod
    def of(cls, counters: TierCounters, block_bytes: int) -> KVTiers:
        c = counters
        return cls(
            gpu=TierUsage.of(c.num_gpu_blocks, c.num_used_gpu_blocks, block_bytes).with_prefix(
                "gpu", c, block_bytes
            ),
            cpu=TierUsage.of(c.num_cpu_blocks, c.num_used_cpu_blocks, block_bytes).with_prefix(
                "cpu", c, block_bytes
            ),
            disk=TierUsage.of(c.num_disk_blocks, c.num_used_disk_blocks, block_bytes).with_prefix(
                "disk", c, block_bytes
            ),
        )

    def to_json(self) -> Json:
        return {name: usage.to_json() for name, usage in self.items()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> KVTiers:
        return cls(**{name: TierUsage.from_json(_obj(raw, name)) for name in TIER_NAMES})


@dataclass(frozen=True)
class KVStats:
    """`LLMEngine.kv_stats()`: blocks and bytes per tier, each request's placement, bytes moved
    per direction, time in cold attention per path, and the scheduler's and runner's counters.
    `to_json()` is the `/v1/kv` body; `from_json()` reads one back (module docstring)."""

    block_size: int = 0  # tokens per block
    block_bytes: int = 0  # bytes of one block: every layer, K and V
    tiers: KVTiers = field(default_factory=KVTiers)
    requests: Mapping[str, RequestTierStats] = field(default_factory=dict)  # running, then parked
    bytes_moved: Mapping[str, int] = field(default_factory=dict)  # "gpu_to_cpu", ... -> bytes since start
    cold_attention_seconds: ColdAttentionSeconds = field(default_factory=ColdAttentionSeconds)
    max_cold_fraction: float = 0.0  # largest share of used blocks in the cold tiers after a step
    scheduler: SchedulerStats | None = None  # None only when read from a payload without it
    runner: RunnerKVStats = field(default_factory=RunnerKVStats)
    # Seconds since the server's engine thread published this snapshot; None: read fresh.
    snapshot_age_s: float | None = None

    @property
    def total_bytes_moved(self) -> int:
        """Bytes moved between tiers since start, every direction."""
        return sum(self.bytes_moved.values())

    def to_json(self) -> Json:
        out: Json = {
            "block_size": self.block_size,
            "block_bytes": self.block_bytes,
            "tiers": self.tiers.to_json(),
            "requests": {req_id: r.to_json() for req_id, r in self.requests.items()},
            "bytes_moved": dict(self.bytes_moved),
            "cold_attention_seconds": self.cold_attention_seconds.to_json(),
            "max_cold_fraction": self.max_cold_fraction,
            "scheduler": self.scheduler.to_json() if self.scheduler is not None else {},
            "runner": self.runner.to_json(),
        }
        if self.snapshot_age_s is not None:
            out["snapshot_age_s"] = self.snapshot_age_s
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> KVStats:
        """Raises TypeError/ValueError on a payload whose values are not numbers where numbers go."""
        if not isinstance(raw, Mapping):
            raise TypeError(f"KV stats must be a JSON object, got {type(raw).__name__}")
        sched = raw.get("scheduler")
        age = raw.get("snapshot_age_s")
        return cls(
            block_size=int(raw.get("block_size") or 0),
            block_bytes=int(raw.get("block_bytes") or 0),
            tiers=KVTiers.from_json(_obj(raw, "tiers")),
            requests={
                str(req_id): RequestTierStats.from_json(r if isinstance(r, Mapping) else {})
                for req_id, r in _obj(raw, "requests").items()
            },
            bytes_moved=_counts(_obj(raw, "bytes_moved")),
            cold_attention_seconds=ColdAttentionSeconds.from_json(_obj(raw, "cold_attention_seconds")),
            max_cold_fraction=float(raw.get("max_cold_fraction") or 0.0),
            scheduler=SchedulerStats.from_json(sched) if isinstance(sched, Mapping) and sched else None,
            runner=RunnerKVStats.from_json(_obj(raw, "runner")),
            snapshot_age_s=None if age is None else float(age),
        )
