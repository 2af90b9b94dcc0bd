"""After a failed step: its requests are retried one at a time, so that a request whose input
makes a step fail is failed alone and the others go on (issue 21).

How: the engine hands the failed step's request ids to `Scheduler.requeue_failed`, which drops
their KV (recomputed from their tokens, never reused: the failed step may have written garbage,
so their gpu blocks also leave the prefix cache) and puts them at the front of `waiting`. Then
`StepIsolation` lets only the first suspect run until a step with it succeeds, then the next. A
suspect that fails alone is the offender: the engine fails it and no other. A request is retried
at most `MAX_RETRIES` times, so a failure that no isolation cures still ends.

Invariants: while suspects are pending no other request is scheduled (their steps are held back
for the suspects' isolated steps, about one step each); isolation changes which requests run,
never their tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

MAX_RETRIES = 2


class StepIsolation:
    """The suspects of failed steps and how often each was retried; knows request ids only (the
    scheduler moves the requests themselves)."""

    def __init__(self) -> None:
        self.suspects: deque[str] = deque()
        self._retries: dict[str, int] = {}

    def may_retry(self, req_id: str) -> bool:
        return self._retries.get(req_id, 0) < MAX_RETRIES

    def add(self, req_ids: Iterable[str]) -> None:
        """Suspects, in the order they should run alone."""
        for req_id in req_ids:
            self._retries[req_id] = self._retries.get(req_id, 0) + 1
            if req_id not in self.suspects:
                self.suspects.append(req_id)

    def holds_back(self, req_id: str) -> bool:
        """Whether this step must leave `req_id` out (another suspect runs alone)."""
        return bool(self.suspects) and req_id != self.suspects[0]

    def step_succeeded(self, req_ids: Iterable[str]) -> None:
        """A step with these requests completed: the suspect among them is cleared."""
        if self.suspects and self.suspects[0] in set(req_ids):
            self.suspects.popleft()

    def forget(self, req_id: str) -> None:
        """The request ended (any way)."""
        self._retries.pop(req_id, None)
        if req_id in self.suspects:
            self.suspects.remove(req_id)
