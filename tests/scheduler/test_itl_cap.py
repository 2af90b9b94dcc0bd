"""ITL-aware chunking: while a request decodes, a step carries at most `prefill_token_cap`
prefill tokens (exact counts on the fake runner); with nothing decoding there is no cap."""

from __future__ import annotations

from kvspill.engine.itl_budget import AUTO_MIN_S, ItlBudget
from kvspill.scheduler.scheduler import Scheduler

from .test_scheduler import CONFIG, FakeRunner, make_request, step


def test_prefill_is_capped_only_while_a_request_decodes() -> None:
    scheduler, runner = Scheduler(CONFIG), FakeRunner()
    scheduler.prefill_token_cap = 6
    scheduler.add_request(make_request("chat", [1, 2, 3], max_tokens=8))
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"chat": 3}  # nothing decodes yet: no cap
    scheduler.add_request(make_request("long", list(range(10, 30)), max_tokens=2))
    chunks = []
    for _ in range(4):
        batch, _ = step(scheduler, runner)
        assert batch.num_scheduled_tokens["chat"] == 1  # the decode is never starved
        chunks.append(batch.num_scheduled_tokens.get("long", 0))
    assert chunks == [6, 6, 6, 2]  # 20 prompt tokens in chunks of the cap


def test_a_second_prompt_waits_for_the_cap() -> None:
    scheduler, runner = Scheduler(CONFIG), FakeRunner()
    scheduler.prefill_token_cap = 5
    scheduler.add_request(make_request("chat", [1, 2], max_tokens=8))
    step(scheduler, runner)
    scheduler.add_request(make_request("a", [3, 4, 5], max_tokens=2))
    scheduler.add_request(make_request("b", [6, 7, 8, 9], max_tokens=2))
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens == {"chat": 1, "a": 3, "b": 2}  # 5 prefill tokens in all
    batch, _ = step(scheduler, runner)
    assert batch.num_scheduled_tokens["b"] == 2 and batch.num_scheduled_tokens["chat"] == 1


def test_budget_follows_the_step_model() -> None:
    budget = ItlBudget(0.020, floor=64, ceiling=4096, base_s=0.004, seconds_per_token=1e-5)
    assert budget.prefill_cap() == 1600  # (20 - 4) ms / 10 us
    for _ in range(30):  # measured: decode steps of 5 ms, 1000-token chunks that add 20 ms
        budget.observe(0, 0.005)
        budget.observe(1000, 0.025)
    assert abs(budget.base_s - 0.005) < 1e-4 and abs(budget.seconds_per_token(0) - 2e-5) < 1e-6
    assert abs(budget.prefill_cap() - 750) <= 5
    slow = ItlBudget(0.010, floor=64, ceiling=4096, base_s=0.009, seconds_per_token=1e-4)
    assert slow.prefill_cap() == 64  # the target cannot be met: prompts still move
    auto = ItlBudget(None, floor=64, ceiling=4096)
    assert auto.target_s is None and auto.prefill_cap() == 64  # nothing known: a small first chunk
    auto.observe(0, 0.002)
    assert auto.target_s == AUTO_MIN_S
    auto.observe(0, 0.020)
    assert auto.target_s > AUTO_MIN_S  # AUTO_FACTOR x the decode step once that is longer


def test_a_prefill_token_costs_more_deeper_into_a_prompt() -> None:
    """Chunks of one long prompt: the fit separates the per-token cost from its attention over
    the context, so later chunks of the prompt get smaller caps."""
    budget = ItlBudget(0.030, floor=64, ceiling=8192, base_s=0.005)
    a, b = 1e-5, 2e-9  # 10 us a token, plus 2 ns per token of context
    for i in range(40):
        context, n = 1024 * (i % 16), 512 + 64 * (i % 5)
        budget.observe(0, 0.005)
        budget.observe(n, 0.005 + n * (a + b * context), context)
    assert abs(budget.per_token - a) < 1e-7 and abs(budget.per_token_context - b) < 1e-10
    assert budget.prefill_cap(0) == int(0.025 / a)
    assert budget.prefill_cap(30_000) == int(0.025 / (a + b * 30_000)) < budget.prefill_cap(0) // 2
