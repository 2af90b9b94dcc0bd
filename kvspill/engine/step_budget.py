"""A step's token budget sized by measured step time, so that no step runs much longer than a
target (pure Python, no torch).

Why: the engine thread applies aborts, disconnects and shutdown only between steps. A prefill
chunk of `--max-num-batched-tokens` on a slow device (a CPU, a large model) took 55 s, and a
client that left during it held its KV and the thread for all of that. With this budget a long
prompt is prefilled in chunks of about `target_s` each and cancellation is checked between them.

Invariants:
- The budget is `target_s / seconds_per_token`, clamped to [floor, ceiling]; the rate is an
  exponential average over steps that computed at least `floor` tokens (decode-only steps say
  little about the cost of a prefill token and are cheap anyway).
- Before any measurement the budget is the floor: one short first step measures the rate (a
  first step of --max-num-batched-tokens took 78 s on a loaded 2-core CPU).
"""

from __future__ import annotations

SMOOTHING = 0.5  # weight of the newest measurement


class StepBudget:
    def __init__(self, target_s: float, floor: int, ceiling: int) -> None:
        self.target_s = target_s
        self.floor = max(1, min(floor, ceiling))
        self.ceiling = ceiling
        self.seconds_per_token: float | None = None
        self.tokens = self.floor  # one small first step, then sized by what it measured

    def observe(self, num_tokens: int, seconds: float) -> int:
        """Record one step; returns the next step's token budget."""
        if num_tokens >= self.floor and seconds > 0:
            rate = seconds / num_tokens
            old = self.seconds_per_token
            self.seconds_per_token = rate if old is None else SMOOTHING * rate + (1 - SMOOTHING) * old
            wanted = int(self.target_s / self.seconds_per_token)
            self.tokens = max(self.floor, min(self.ceiling, wanted))
        return self.tokens
