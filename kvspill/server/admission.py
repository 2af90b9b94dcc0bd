"""The AsyncEngine's front desk, on the event-loop thread: which requests wait, which are open.

Why on the event loop and not the engine thread: the engine thread only looks at its commands
between steps, so a full queue was refused only after the current step (3.8 s on the CPU), and
a shutdown could not end streams while a long step ran. Here both happen at once.

Invariants (all methods run on the event-loop thread; the engine thread reaches them through
`loop.call_soon_threadsafe`):
- `admit` refuses a group (`ServerBusyError`) when, counted with what already waits, it would
  pass `max_waiting` requests or `max_queued_tokens` prompt tokens; it always admits a group
  when nothing waits, so one large request is never refused forever.
- A prompt of token ids that cannot fit the model's context is refused before it is counted
  (`check_fits_context`: a 400 `context_length_exceeded`); counted first, a full queue answered
  it with a 503 "retry later" that no retry could ever pass.
- A request waits from `admit` to its first output (`started`), and is open until it ends
  (`ended`: finished, aborted, failed or refused); `fail_all` hands every open request's queue
  an error at once and forgets them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from kvspill.errors import ContextLengthExceededError


class ServerBusyError(Exception):
    """The waiting queue is full (requests or prompt tokens); retry later."""


@dataclass
class _Open:
    aqueue: asyncio.Queue
    waiting_tokens: int | None  # prompt tokens while waiting for the first output, then None


def prompt_size(prompt: str | list[int]) -> int:
    """Tokens of a prompt for the waiting bound; a text prompt counts its characters (one token
    is at least one character, so the bound never under-counts it)."""
    return len(prompt)


def check_fits_context(prompt: str | list[int], max_tokens: int | None, max_model_len: int) -> None:
    """Raise ContextLengthExceededError for token ids (text is tokenized by the engine, which
    checks it there) that leave no room for an answer within `max_model_len`, as the engine's
    `check_prompt` would, but before the request waits."""
    if not isinstance(prompt, list):
        return
    n = len(prompt)
    if n >= max_model_len:
        raise ContextLengthExceededError(max_model_len, n)
    if max_tokens is not None and n + max_tokens > max_model_len:
        raise ContextLengthExceededError(max_model_len, n, max_tokens)


class FrontDesk:
    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self.max_queued_tokens: int | None = None  # set once the engine's max_model_len is known
        self._open: dict[str, _Open] = {}

    def admit(self, req_ids: Sequence[str], sizes: Sequence[int], aq: asyncio.Queue) -> None:
        waiting = [o.waiting_tokens for o in self._open.values() if o.waiting_tokens is not None]
        if waiting:
            self._check_room(len(waiting), sum(waiting), len(req_ids), sum(sizes))
        for req_id, size in zip(req_ids, sizes, strict=True):
            self._open[req_id] = _Open(aq, size)

    def _check_room(self, num_waiting: int, queued: int, num_requests: int, num_tokens: int) -> None:
        if num_waiting + num_requests > self.max_waiting:
            raise ServerBusyError(
                f"{num_waiting} requests are already waiting (at most {self.max_waiting}); retry later"
            )
        if self.max_queued_tokens is not None and queued + num_tokens > self.max_queued_tokens:
            raise ServerBusyError(
                f"{queued} prompt tokens are already waiting and this request brings "
                f"{num_tokens} (at most {self.max_queued_tokens} may wait); retry later"
            )

    def started(self, req_id: str) -> None:
        if (entry := self._open.get(req_id)) is not None:
            entry.waiting_tokens = None

    def ended(self, req_ids: Sequence[str]) -> None:
        for req_id in req_ids:
            self._open.pop(req_id, None)

    def fail_all(self, error: Exception) -> list[str]:
        """Hand every open request `error` now; returns their ids (for the engine to abort)."""
        ids = list(self._open)
        for aq in {id(o.aqueue): o.aqueue for o in self._open.values()}.values():
            aq.put_nowait(error)
        self._open.clear()
        return ids

    @property
    def num_open(self) -> int:
        return len(self._open)

    @property
    def num_waiting(self) -> int:
        return sum(o.waiting_tokens is not None for o in self._open.values())
