"""A request as the scheduler sees it: token ids, progress counters and status (pure Python).

The scheduler owns every `Request`; the runner never sees one (it gets `NewRequestData` and
`CachedRequestData` from `kvspill.types`). vLLM v1 vocabulary.

Invariants:
- `all_token_ids == prompt_token_ids + output_token_ids` at all times; tokens are only ever
  appended, through `append_output_token_ids`. The one exception is a context shift
  (`drop_context`, --context-shift): `all_token_ids` is then the context, the tokens the KV
  covers, and loses a middle part; the prompt and output lists keep every token.
- `0 <= num_computed_tokens <= num_tokens`; the tokens in `[num_computed_tokens, num_tokens)`
  still need their KV computed. There is no prefill/decode flag: a decode is the case
  `num_tokens - num_computed_tokens == 1`.
- `block_hashes[i]` is the chained hash of full block `i` of `all_token_ids`:
  `hash_block_tokens(block_hashes[i - 1] or hash_seed, tokens of block i)`. After a context
  shift the blocks past the dropped part hash from a parent salted with a random number: their
  keys turned, so their KV is this request's alone (it may find it again after a preemption). Once `block_size` is
  known (given here, or bound by `Scheduler.add_request`) it is kept up to date as tokens are
  appended, so `len(block_hashes) == num_tokens // block_size`. The hash is BLAKE2b (64 bits),
  the same in every process: prefix blocks persisted to files (`storage/persist.py`) are found again
  after a restart. `hash_seed` is the engine's KV fingerprint (model, dtypes, RoPE scaling,
  block size: `engine_setup.kv_fingerprint`), so a different model never hits.
- `num_cached_tokens` is the prefix-cache hit of the first schedule; a resume after a
  preemption does not change it.
- `num_pending_tokens` (async scheduling only): tokens a step in flight is sampling on the
  device, whose values are not known yet. They count in `num_tokens_with_pending` (what the
  scheduler may compute next) but not in `num_tokens`, `all_token_ids` or `block_hashes`.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from array import array
from collections.abc import Iterable, Sequence

from kvspill.sampling_params import SamplingParams
from kvspill.types import RequestUpdate


class RequestStatus(enum.IntEnum):
    """Lifecycle of a request. Every status from FINISHED_STOPPED on is final."""

    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_ERROR = enum.auto()

    def is_finished(self) -> bool:
        """True for the final statuses. Works as `status.is_finished()` or `RequestStatus.is_finished(s)`."""
        return self >= RequestStatus.FINISHED_STOPPED


# OpenAI `finish_reason` of each final status.
FINISH_REASONS: dict[RequestStatus, str] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}


def get_finish_reason(status: RequestStatus) -> str | None:
    """Return "stop", "length", "abort" or "error" for a final status; None while unfinished."""
    return FINISH_REASONS.get(status)


def hash_block_tokens(parent_block_hash: int | None, block_token_ids: Sequence[int]) -> int:
    """Chained hash of one full block: equal hashes mean equal whole prefixes (up to collisions).

    A 63-bit int from BLAKE2b of the parent hash (0 for None) and the token ids: stable across
    processes and Python versions (Python's `hash(None)` is not), fast enough per full block.
    """
    digest = hashlib.blake2b(digest_size=8)
    digest.update((parent_block_hash or 0).to_bytes(8, "little", signed=True))
    digest.update(array("q", block_token_ids).tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


class Request:
    """One generation request and its progress.

    `max_tokens` is resolved here: the sampling params' `max_tokens`, or, when that is None,
    whatever fits before `max_model_len`. `block_size` is the KV cache's block size, needed to
    hash full blocks for the prefix cache; leave it None and `Scheduler.add_request` binds the
    scheduler's.
    """

    def __init__(
        self,
        req_id: str,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams,
        eos_token_ids: frozenset[int],
        arrival_time: float,
        max_model_len: int,
        block_size: int | None = None,
        hash_seed: int = 0,
    ) -> None:
        self.req_id = req_id
        self.prompt_token_ids: list[int] = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self.eos_token_ids = frozenset(eos_token_ids)
        self.arrival_time = arrival_time
        self.max_model_len = max_model_len
        self.block_size: int | None = None
        self.hash_seed = hash_seed  # the parent hash of block 0 (the scheduler binds its own)

        self.output_token_ids: list[int] = []
        self._all_token_ids: list[int] = list(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.num_preemptions = 0
        self.status = RequestStatus.WAITING
        self.stop_reason: int | None = None  # the stop token id that ended it, if any
        self.error_message: str | None = None  # set with FINISHED_ERROR
        self.block_hashes: list[int] = []
        self.num_pending_tokens = 0
        # --context-shift (or the request's own): reaching max_model_len drops a middle part of the
        # context instead of finishing (the scheduler resolves it and does the shift)
        self.context_shift = False
        self.num_shifted_tokens = 0  # tokens dropped from the context so far
        self._salt_from: tuple[int, int] | None = None  # (first salted block, salt) after a shift
        if block_size is not None:
            self.bind_block_size(block_size)

    # ---- sizes -------------------------------------------------------------------------

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens known so far."""
        return len(self._all_token_ids)

    @property
    def num_tokens_with_pending(self) -> int:
        """Known tokens plus those a step in flight is sampling (async scheduling)."""
        return len(self._all_token_ids) + self.num_pending_tokens

    @property
    def reached_length_limit(self) -> bool:
        """True when the tokens in flight already reach max_tokens or the context: no more steps."""
        return (
            self.num_output_tokens + self.num_pending_tokens >= self.max_tokens
            or self.num_tokens_with_pending >= self.max_model_len
        )

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt followed by outputs. A live list: do not mutate it."""
        return self._all_token_ids

    @property
    def max_tokens(self) -> int:
        """Output tokens allowed: sampling `max_tokens`, or until `max_model_len` when None."""
        if self.sampling_params.max_tokens is not None:
            return self.sampling_params.max_tokens
        return max(self.max_model_len - self.num_prompt_tokens, 1)

    # ---- status ------------------------------------------------------------------------

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished()

    @property
    def finish_reason(self) -> str | None:
        return get_finish_reason(self.status)

    # ---- mutation ----------------------------------------------------------------------

    def append_output_token_ids(self, token_ids: int | Iterable[int]) -> None:
        """Append sampled tokens and hash any block they complete."""
        if isinstance(token_ids, int):
            token_ids = (token_ids,)
        for token_id in token_ids:
            self.output_token_ids.append(token_id)
            self._all_token_ids.append(token_id)
        self._update_block_hashes()

    def bind_block_size(self, block_size: int, hash_seed: int | None = None) -> None:
        """Fix the block size (and seed) used for `block_hashes` (once; the same values again: no-op)."""
        if hash_seed is not None and hash_seed != self.hash_seed:
            if self.block_hashes:
                raise ValueError(f"request {self.req_id!r} was hashed with another hash seed")
            self.hash_seed = hash_seed
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if self.block_size is not None and self.block_size != block_size:
            raise ValueError(
                f"request {self.req_id!r} was built for block_size={self.block_size}, not {block_size}"
            )
        self.block_size = block_size
        self._update_block_hashes()

    def _update_block_hashes(self) -> None:
        size = self.block_size
        if size is None:
            return
        while (len(self.block_hashes) + 1) * size <= len(self._all_token_ids):
            start = len(self.block_hashes) * size
            parent = self.block_hashes[-1] if self.block_hashes else self.hash_seed
            if self._salt_from is not None and len(self.block_hashes) == self._salt_from[0]:
                parent = hash_block_tokens(parent, (self._salt_from[1],))
            self.block_hashes.append(hash_block_tokens(parent, self._all_token_ids[start : start + size]))

    def drop_context(self, start: int, num_tokens: int) -> None:
        """Context shift: drop context tokens [start, start + num_tokens) (whole blocks); the block
        hashes from `start` on are rebuilt from a fresh random salt (module docstring)."""
        assert self.block_size is not None and start % self.block_size == 0
        assert num_tokens > 0 and num_tokens % self.block_size == 0
        del self._all_token_ids[start : start + num_tokens]
        self.num_shifted_tokens += num_tokens
        first = start // self.block_size
        del self.block_hashes[first:]
        self._salt_from = (first, secrets.randbits(62))
        self._update_block_hashes()

    def to_update(self, new_token_ids: list[int]) -> RequestUpdate:
        """What one step did to this request, for the engine."""
        return RequestUpdate(
            req_id=self.req_id,
            new_token_ids=new_token_ids,
            finished=self.is_finished,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
            error=self.error_message,
            num_cached_tokens=self.num_cached_tokens,
        )

    def __repr__(self) -> str:
        return (
            f"Request({self.req_id!r}, status={self.status.name}, num_tokens={self.num_tokens}, "
            f"num_computed_tokens={self.num_computed_tokens}, num_output_tokens={self.num_output_tokens})"
        )

    def stop_status(self) -> RequestStatus | None:
        """The final status the last appended token ends this request with, or None.

        EOS (unless ignore_eos) and stop token ids count only once min_tokens are out; the length
        limits are max_tokens and the context (max_model_len; a request that shifts its context
        reaches it and goes on: the scheduler shifts it)."""
        params = self.sampling_params
        last_token_id = self.output_token_ids[-1]
        if self.num_output_tokens >= params.min_tokens:
            if not params.ignore_eos and last_token_id in self.eos_token_ids:
                return RequestStatus.FINISHED_STOPPED
            if last_token_id in params.stop_token_ids:
                self.stop_reason = last_token_id
                return RequestStatus.FINISHED_STOPPED
        if self.num_output_tokens >= self.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        if self.num_tokens >= self.max_model_len and not self.context_shift:
            return RequestStatus.FINISHED_LENGTH
        return None
