"""The manager's `GET /api/results`: the kept benchmark summaries, newest first, one model's
history with `?model=`, behind the API key; a bad limit is a 400 in the API's error shape."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from kvspill.manager.api import create_manager_app
from kvspill.manager.supervisor import Supervisor
from kvspill.registry import open_registry
from kvspill.registry.results import record_result

API_KEY = "results-key"


def test_results_route_lists_a_model_history(tmp_path: Path):
    registry = open_registry(tmp_path)
    record_result(registry, "m1", "progressive", {"largest_stable_ctx": 4096}, passed=True)
    record_result(registry, "m2", "stability", {"errors": 0}, passed=True)
    record_result(registry, "m1", "compare", {"configs": {"weights-offload": {"load_s": 9.5}}})
    supervisor = Supervisor(tmp_path / "logs", tmp_path)
    app = create_manager_app(registry, supervisor, API_KEY, 1)
    auth = {"Authorization": f"Bearer {API_KEY}"}
    with TestClient(app) as client:
        assert client.get("/api/results").status_code == 401
        everything = client.get("/api/results", headers=auth).json()["results"]
        assert [(r["model"], r["suite"]) for r in everything] == [
            ("m1", "compare"),
            ("m2", "stability"),
            ("m1", "progressive"),
        ]
        history = client.get("/api/results", params={"model": "m1"}, headers=auth).json()["results"]
        assert [r["suite"] for r in history] == ["compare", "progressive"]
        assert history[0]["figures"]["configs"]["weights-offload"]["load_s"] == 9.5
        assert history[1]["passed"] is True and history[1]["host"]
        one = client.get("/api/results", params={"model": "m1", "suite": "progressive"}, headers=auth)
        assert [r["figures"]["largest_stable_ctx"] for r in one.json()["results"]] == [4096]
        bad = client.get("/api/results", params={"limit": 0}, headers=auth)
        assert bad.status_code == 400 and "limit must be between 1" in bad.json()["error"]["message"]
