"""A per-client bound on uncached grammar-compile work: compile-seconds in a sliding minute.

Why: a compile is cached by the grammar's canonical form, but a one-character change to a
schema, regex or grammar is a new grammar, so a client could keep the compile workers (and the
server's compile thread) busy with endless variants, each under the deadline. Cache hits cost
nothing and are not counted.

Whose budget: the client's IP address (`grammar_gate.client_key`). Not the bearer token: a server has at
most one API key (`--api-key`), and without one a token is unchecked text a client can change
at will to get a fresh budget. Behind a reverse proxy every client shares the proxy's address.

Invariants (event-loop thread only):
- `start` refuses (`CompileBudgetError`, HTTP 429 + Retry-After) a client whose compiles in the
  last WINDOW_S took `seconds_per_window` or more, or who has `max_in_flight` compiles running;
  `finish` charges what a compile took. A budget of 0 bounds nothing.
- Torch- and fastapi-free (the CLI reads its default).
- Retry-After is when enough of the window's charges have aged out to go under the budget.
- At most MAX_CLIENTS clients are remembered; past it the least recently seen is forgotten.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

WINDOW_S = 60.0
# Compile-seconds per client per minute (the trial in a worker plus the server's own compile):
# hundreds of new ordinary schemas (tens of ms each) or one and a half at the 10 s deadline.
DEFAULT_BUDGET_S = 30.0
MAX_IN_FLIGHT = 2  # uncached compiles one client may have running or queued at once
MAX_CLIENTS = 10_000


class CompileBudgetError(Exception):
    """The client used its compile budget; `retry_after_s` says when it may compile again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class CompileBudget:
    def __init__(
        self,
        seconds_per_window: float = DEFAULT_BUDGET_S,
        max_in_flight: int = MAX_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds_per_window = seconds_per_window
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._charges: OrderedDict[str, deque[tuple[float, float]]] = OrderedDict()  # (when, seconds)
        self._in_flight: dict[str, int] = {}

    def start(self, client: str) -> None:
        """Admit one uncached compile of `client`, or raise CompileBudgetError."""
        if self.seconds_per_window <= 0:
            return
        charges = self._recent(client)
        spent = sum(seconds for _, seconds in charges)
        if spent >= self.seconds_per_window:
            raise CompileBudgetError(
                f"this client's grammar compiles took {spent:.1f} s in the last {WINDOW_S:g} s; this "
                f"server compiles at most {self.seconds_per_window:g} s of new grammars per client per "
                f"minute (--guided-compile-budget); cached grammars are free: reuse the same schema",
                self._retry_after(charges, spent),
            )
        if self._in_flight.get(client, 0) >= self.max_in_flight:
            raise CompileBudgetError(
                f"this client already has {self.max_in_flight} grammar compiles running; "
                "wait for them (or send the same schema: it is compiled once)",
                1,
            )
        self._in_flight[client] = self._in_flight.get(client, 0) + 1

    def finish(self, client: str, seconds: float) -> None:
        """The compile `start` admitted has ended after `seconds` of work."""
        if self.seconds_per_window <= 0:
            return
        left = self._in_flight.get(client, 1) - 1
        if left > 0:
            self._in_flight[client] = left
        else:
            self._in_flight.pop(client, None)
        self._recent(client).append((self._clock(), seconds))
        while len(self._charges) > MAX_CLIENTS:
            self._charges.popitem(last=False)

    def _recent(self, client: str) -> deque[tuple[float, float]]:
        """The client's charges of the last WINDOW_S (older ones dropped), as most recently seen."""
        charges = self._charges.setdefault(client, deque())
        self._charges.move_to_end(client)
        horizon = self._clock() - WINDOW_S
        while charges and charges[0][0] < horizon:
            charges.popleft()
        return charges

    def _retry_after(self, charges: deque[tuple[float, float]], spent: float) -> int:
        """Whole seconds until enough charges age out for `spent` to go under the budget."""
        for when, seconds in charges:
            spent -= seconds
            if spent < self.seconds_per_window:
                return max(1, math.ceil(when + WINDOW_S - self._clock()))
        return math.ceil(WINDOW_S)
