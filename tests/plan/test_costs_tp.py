"""The plan's collectives term for tensor parallelism (plan/costs.py: collectives_s)."""

from __future__ import annotations

import pytest

from kvspill.cli.plan_cmd import plan_json
from kvspill.options import EngineOptions
from kvspill.plan.costs import collectives_s


def test_one_rank_has_no_collectives_and_more_ranks_cost_more_per_call():
    assert collectives_s(32, 1) == 0.0
    two, four = collectives_s(32, 2), collectives_s(32, 4)
    assert two == pytest.approx(66 * 9e-6) and four == pytest.approx(66 * 15e-6)


def test_the_tp_plan_adds_the_collectives_to_the_step(monkeypatch):
    """W3 per rank at TP=2 and 4: the plan's decode step is longer by exactly the collectives."""
    from kvspill.plan import costs

    def step_s(n: int) -> float:
        options = EngineOptions(vram_budget="80GiB", max_model_len="32K", tensor_parallel_size=n)
        plan, _, _ = plan_json("llama-8b", options)
        return 1 / plan["plans"]["yours"]["decode_tok_s"]

    with_comm = {n: step_s(n) for n in (1, 2, 4)}
    monkeypatch.setattr(costs, "TP_COLLECTIVE_BASE_S", 0.0)
    monkeypatch.setattr(costs, "TP_COLLECTIVE_PER_DOUBLING_S", 0.0)
    for n in (1, 2, 4):
        assert with_comm[n] - step_s(n) == pytest.approx(collectives_s(32, n), rel=0.02, abs=1e-6)
