"""A kept result in words and as a trend figure (`registry/result_text.py`), carried by
`BenchResult.to_json`; `GET /api/results?model=NAME` also finds the runs that recorded NAME's
source (what `kvspill bench all --model NAME` stores) and lists the models with results."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from kvspill.manager.api import create_manager_app
from kvspill.manager.supervisor import Supervisor
from kvspill.registry import ModelEntry, open_registry
from kvspill.registry.result_text import headline, trend
from kvspill.registry.results import list_results, record_result

API_KEY = "results-key"
PROGRESSIVE = {"largest_stable_ctx": 2048, "decode_tok_s": {"1024": 30.5, "2048": 21.25}, "failed_ctx": 4096}
COMPARE = {
    "configs": {
        "weights-resident": {"load_s": 2.0, "decode_tok_s": 40.0, "ttft_s": 0.5, "total_s": 9.0},
        "weights-offload": {"error": "OOM"},
    }
}


def test_headline_and_trend_of_each_suite():
    assert (
        headline("progressive", PROGRESSIVE)
        == "largest stable 2048 tok, decode 21.25 tok/s at 2048, failed at 4096"
    )
    assert trend("progressive", PROGRESSIVE) == {"decode tok/s": 21.25}
    assert trend("progressive", {"largest_stable_ctx": None, "decode_tok_s": {}}) == {}
    stability = {"requests": 40, "errors": 1, "rss_growth_gib": 0.5, "tok_s_mean": 12.0}
    assert headline("stability", stability) == "40 requests, 1 errors, RSS 0.5 GiB, 12 tok/s"
    assert trend("stability", stability) == {"mean tok/s": 12.0}
    assert trend("stability", {**stability, "tok_s_mean": None}) == {}
    assert headline("compare", COMPARE) == (
        "weights-resident: load 2 s, 40 tok/s, TTFT 0.5 s, total 9 s; weights-offload: failed"
    )
    assert trend("compare", COMPARE) == {"weights-resident decode tok/s": 40.0}  # the failed one has none


def test_to_json_carries_the_text_and_the_trend(tmp_path: Path):
    registry = open_registry(tmp_path)
    kept = record_result(registry, "m", "progressive", PROGRESSIVE, passed=True)
    (row,) = list_results(registry, model=["m", "other"])
    assert row.to_json()["headline"] == headline("progressive", PROGRESSIVE) == kept.to_json()["headline"]
    assert row.to_json()["trend"] == {"decode tok/s": 21.25}
    assert list_results(registry, model=[]) == []
    # kept with sorted keys, {"512", "1024"} comes back "1024" first: the rate shown is still 1024's
    record_result(
        registry,
        "n",
        "progressive",
        {"largest_stable_ctx": 1024, "decode_tok_s": {"512": 30.0, "1024": 25.5}},
    )
    (back,) = list_results(registry, model="n")
    assert list(back.figures["decode_tok_s"]) == ["1024", "512"]
    assert back.to_json()["headline"] == "largest stable 1024 tok, decode 25.5 tok/s at 1024"
    assert back.to_json()["trend"] == {"decode tok/s": 25.5}


def test_results_route_finds_a_registered_models_runs_by_its_source(tmp_path: Path):
    registry = open_registry(tmp_path)
    source = str(tmp_path / "model-dir")
    registry.add_model(ModelEntry("tiny", source, "hf_dir", "safetensors", "float32", 1, 0.0))
    record_result(registry, source, "stability", {"requests": 3, "errors": 0, "tok_s_mean": 5.0}, passed=True)
    record_result(registry, "tiny", "progressive", PROGRESSIVE, passed=False)
    record_result(registry, "elsewhere", "compare", COMPARE)
    app = create_manager_app(registry, Supervisor(tmp_path / "logs", tmp_path), API_KEY, 1)
    auth = {"Authorization": f"Bearer {API_KEY}"}
    with TestClient(app) as client:
        body = client.get("/api/results", params={"model": "tiny"}, headers=auth).json()
        unregistered = client.get("/api/results", params={"model": source}, headers=auth).json()["results"]
    assert [(r["model"], r["suite"]) for r in body["results"]] == [
        ("tiny", "progressive"),
        (source, "stability"),
    ]
    assert body["results"][1]["headline"] == "3 requests, 0 errors, RSS -, 5 tok/s"
    assert [r["suite"] for r in unregistered] == ["stability"]  # a path is not widened
    assert [(m["model"], m["count"]) for m in body["models"]] == [("elsewhere", 1), ("tiny", 1), (source, 1)]
