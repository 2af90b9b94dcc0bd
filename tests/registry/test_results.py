"""Benchmark results in the registry: the 2 -> 3 migration keeps an older database's rows, results
round-trip newest first with their filters, and what JSON cannot hold is refused by name."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvspill.registry import open_registry
from kvspill.registry.results import list_results, record_result
from kvspill.registry.store import ModelEntry, Registry, RegistryError


def test_a_registry_of_schema_2_gains_results_and_keeps_its_rows(tmp_path: Path):
    old = Registry(tmp_path / "registry.sqlite3")
    old.migrate(target=2)  # a registry written before results existed
    old.add_model(ModelEntry("kept", "/m.gguf", "gguf", "gguf", "Q4_1", 1, 1.0))
    old.save_profile("p", "kept", {"max_model_len": 512})
    old.close()
    reg = open_registry(tmp_path)
    assert reg.model("kept").source == "/m.gguf" and reg.profile("p").flags == {"max_model_len": 512}
    stored = record_result(reg, "kept", "progressive", {"largest_stable_ctx": 4096}, passed=True, profile="p")
    assert stored.result_id >= 1 and stored.host
    reg.close()
    again = open_registry(tmp_path)  # written rows survive a reopen
    (row,) = list_results(again)
    assert (row.model, row.profile, row.suite, row.passed) == ("kept", "p", "progressive", True)
    assert row.figures == {"largest_stable_ctx": 4096} and row.to_json()["figures"] == row.figures


def test_results_newest_first_filtered_by_model_and_suite(tmp_path: Path):
    reg = open_registry(tmp_path)
    record_result(reg, "a", "progressive", {"n": 1}, passed=False)
    record_result(reg, "b", "stability", {"n": 2}, passed=True)
    record_result(reg, "a", "compare", {"n": 3, "configs": {"x": {"load_s": 1.5}}}, out_dir="/o")
    assert [r.figures["n"] for r in list_results(reg)] == [3, 2, 1]
    assert [r.figures["n"] for r in list_results(reg, model="a")] == [3, 1]
    assert [r.figures["n"] for r in list_results(reg, model="a", suite="progressive")] == [1]
    assert [r.figures["n"] for r in list_results(reg, limit=1)] == [3]
    newest = list_results(reg, model="a")[0]
    assert (
        newest.passed is None and newest.out_dir == "/o" and newest.figures["configs"]["x"]["load_s"] == 1.5
    )
    assert list_results(reg, model="nobody") == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda reg: record_result(reg, "a", "progressive", {"ttft": math.nan}), "ttft is nan"),
        (
            lambda reg: record_result(reg, "a", "compare", {"c": {"x": [1, object()]}}),
            r"c\.x\[1\] is a object",
        ),
        (lambda reg: record_result(reg, "a", "speed", {}), "unknown suite 'speed'"),
        (lambda reg: record_result(reg, "", "compare", {}), "needs the model"),
        (lambda reg: list_results(reg, limit=0), "limit must be between 1"),
        (lambda reg: list_results(reg, suite="nope"), "unknown suite 'nope'"),
    ],
)
def test_bad_results_say_what_to_change(tmp_path: Path, call, message):
    reg = open_registry(tmp_path)
    with pytest.raises(RegistryError, match=message):
        call(reg)
    assert list_results(reg) == []
