"""What the engine does when a step raises: retry its requests one at a time (the scheduler's
isolation.py) so only the offender fails, and after an out-of-memory error also carry fewer
tokens per step for a while (issue 21). `LLMEngine.step` calls `retry_failed_step`.

A disk-tier I/O error (`DiskTierIOError`) first goes to the tiers (`ColdPrefixCache.on_disk_error`):
the unreadable blocks are retired, or after a failed write the disk tier takes no new block.
The step's requests are then retried from scratch, one at a time (a lone one too); one whose
KV cannot be read again, or that no longer fits the tiers left, fails alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kvspill.errors import DiskTierIOError, StepError

if TYPE_CHECKING:
    from kvspill.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)

RESTORE_AFTER_STEPS = 32  # good steps before an out-of-memory cap doubles back


def find_cause(
    error: BaseException, kinds: type[BaseException] | tuple[type[BaseException], ...]
) -> BaseException | None:
    """The first exception of `kinds` in the cause chain of `error` (itself included), or None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kinds):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's or the host's out-of-memory error, anywhere in the cause chain."""
    return find_cause(error, (torch.OutOfMemoryError, MemoryError)) is not None


@dataclass
class OomBackoff:
    """Steps' token cap after out-of-memory errors: halved at each, doubled back after
    RESTORE_AFTER_STEPS good steps, None again once it reaches the configured ceiling."""

    floor: int
    ceiling: int
    cap: int | None = None
    _good_steps: int = 0

    def failed(self, step_tokens: int) -> int:
        base = min(self.cap or self.ceiling, max(step_tokens, self.floor))
        self.cap = max(self.floor, base // 2)
        self._good_steps = 0
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # hand the failed step's temporaries back before the retry
        logger.warning("out of memory in a step: steps now carry at most %d tokens", self.cap)
        return self.cap

    def succeeded(self) -> int | None:
        if self.cap is None:
            return None
        self._good_steps += 1
        if self._good_steps >= RESTORE_AFTER_STEPS:
            self._good_steps = 0
            self.cap = None if self.cap * 2 >= self.ceiling else self.cap * 2
        return self.cap


def retry_failed_step(
    scheduler: Scheduler, oom: OomBackoff, ran: list[str], step_tokens: int, error: Exception
) -> None:
    """Requeue a failed step's requests to run alone; raise StepError for those that must fail:
    a request that failed alone, or one retried too often."""
    disk_error = find_cause(error, DiskTierIOError)
    if isinstance(disk_error, DiskTierIOError):  # before the requeue frees the blocks
        scheduler.kv_tiers.prefix.on_disk_error(disk_error)
    out_of_memory = is_out_of_memory(error)
    if out_of_memory:
        scheduler.oom_token_cap = oom.failed(step_tokens)
    # A lone request is retried too after an out-of-memory or a disk error: not its input's fault.
    retried = scheduler.requeue_failed(ran) if len(ran) > 1 or out_of_memory or disk_error else []
    failed = [r for r in ran if r not in retried]
    logger.warning("a step failed (%s: %s): %d requests retried one at a time, %d failed",
                   type(error).__name__, error, len(retried), len(failed))  # fmt: skip
    if failed or not ran:
        raise StepError(failed, error) from error
