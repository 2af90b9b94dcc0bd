"""The scheduler's limits (`SchedulerConfig`): block counts from the memory plan, the rest from the
user. Pure Python, like the scheduler. What the scheduler hands on (`RequestUpdate`,
`SchedulerStats`) are contracts: `kvspill/types.py`, `kvspill/stats.py`."""

from __future__ import annotations

from dataclasses import dataclass

from kvspill.errors import InvalidParameterError
from kvspill.scheduler.context_shift import check_shift_flags


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling limits. Block counts come from the memory plan, the rest from the user."""

    max_num_seqs: int
    max_num_batched_tokens: int  # token budget of one step (prefill chunk size)
    max_model_len: int
    block_size: int
    num_blocks: int  # KV blocks of the gpu tier
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0  # > 0: no request gets more tokens than this per step
    num_cpu_blocks: int = 0  # KV blocks of the cpu tier (0: no cpu tier)
    num_disk_blocks: int = 0  # KV blocks of the disk tier (0: no disk tier)
    num_sink_blocks: int = 1  # first blocks of each sequence that stay on the gpu tier
    hot_window_tokens: int = 1024  # most recent computed tokens of each sequence that stay on the gpu tier
    # The parent hash of every request's first block: the engine's KV fingerprint (request.py).
    prefix_hash_seed: int = 0
    async_scheduling: bool = (
        False  # schedule step N+1 before step N's tokens are known (scheduler.py's module doc)
    )
    # --context-shift: a full context drops a middle part and goes on (scheduler/context_shift.py)
    context_shift: bool = False
    context_shift_keep: int = 0  # recent tokens kept (0: half of what follows the sinks)
    context_shift_overlap: int = 0  # of those, the last ones computed again instead of turned

    def __post_init__(self) -> None:
        for name, flag in (
            ("max_num_seqs", "--max-num-seqs"),
            ("max_num_batched_tokens", "--max-num-batched-tokens"),
            ("max_model_len", "--max-model-len"),
            ("block_size", "--block-size"),
            ("num_blocks", "num_kv_blocks"),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, f"{flag} must be a positive integer, got {value!r}")
        if self.long_prefill_token_threshold < 0:
            raise InvalidParameterError(
                "long_prefill_token_threshold",
                f"long_prefill_token_threshold must be 0 (off) or positive, got {self.long_prefill_token_threshold}",
            )
        if self.context_shift or self.context_shift_keep or self.context_shift_overlap:
            check_shift_flags(
                self.max_model_len,
                self.block_size,
                self.num_sink_blocks,
                self.context_shift_keep,
                self.context_shift_overlap,
            )
        for name in ("num_cpu_blocks", "num_disk_blocks", "num_sink_blocks", "hot_window_tokens"):
            if getattr(self, name) < 0:
                raise InvalidParameterError(name, f"{name} must not be negative, got {getattr(self, name)}")
