"""The per-client compile budget (`compile_budget.py`) on a fake clock: compile-seconds in a
sliding minute, Retry-After when enough ages out, a cap on compiles at once, 0 for no bound."""

from __future__ import annotations

import pytest

from kvspill.server.compile_budget import CompileBudget, CompileBudgetError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_seconds_per_minute_and_retry_after() -> None:
    clock = Clock()
    budget = CompileBudget(2.0, clock=clock)
    budget.start("a")
    budget.finish("a", 1.5)
    clock.now += 10
    budget.start("a")
    budget.finish("a", 1.0)  # 2.5 s in the window: over
    with pytest.raises(CompileBudgetError, match="--guided-compile-budget") as info:
        budget.start("a")
    assert info.value.retry_after_s == 50  # the 1.5 s charge leaves the window in 50 s
    budget.start("b")  # another client has its own budget
    budget.finish("b", 0.1)
    clock.now += 50.5
    budget.start("a")  # only the 1.0 s charge is left


def test_compiles_at_once_and_no_bound() -> None:
    budget = CompileBudget(100.0, max_in_flight=2, clock=Clock())
    budget.start("a")
    budget.start("a")
    with pytest.raises(CompileBudgetError, match="2 grammar compiles running") as info:
        budget.start("a")
    assert info.value.retry_after_s == 1
    budget.finish("a", 0.01)
    budget.start("a")
    unbounded = CompileBudget(0.0)
    for _ in range(10):
        unbounded.start("a")
    unbounded.finish("a", 1e9)
    unbounded.start("a")
