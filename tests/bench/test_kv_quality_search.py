"""`kv_quality --search-skip`: the bisection finds the fewest worst-first layers that pass the gate,
says when none short of all but one do, and measures each count once."""

from __future__ import annotations

from kvspill.bench.kv_quality import KL_GATE, TOP1_GATE, search_skip_list

PER_LAYER_KL = {0: 0.001, 1: 0.009, 2: 0.004, 3: 0.0005, 4: 0.002, 5: 0.007}  # worst first: 1 5 2 4 0 3


def _measure_passing_from(count_needed: int, calls: list[frozenset[int]]):
    order = [1, 5, 2, 4, 0, 3]

    def measure(kept: set[int]) -> dict[str, float]:
        calls.append(frozenset(kept))
        ok = set(order[:count_needed]) <= kept
        return {"top1_agreement": TOP1_GATE + 0.001 if ok else TOP1_GATE - 0.02, "mean_kl": KL_GATE / 2}

    return measure


def test_the_search_finds_the_fewest_worst_layers_that_pass():
    calls: list[frozenset[int]] = []
    found = search_skip_list(PER_LAYER_KL, _measure_passing_from(3, calls))
    assert found["order_worst_first"] == [1, 5, 2, 4, 0, 3]
    assert found["skip_layers"] == [1, 2, 5]
    assert len(calls) == len(set(calls)) <= 4  # 0, 5, then a bisection of 1..4
    assert set(found["measured"]) == {len(c) for c in calls}


def test_no_list_when_the_format_passes_and_none_when_nothing_short_of_all_does():
    assert search_skip_list(PER_LAYER_KL, _measure_passing_from(0, []))["skip_layers"] == []
    assert search_skip_list(PER_LAYER_KL, _measure_passing_from(6, []))["skip_layers"] is None
