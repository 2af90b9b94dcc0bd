"""`POST /api/pull`: `kvspill pull` as a manager job with progress, against a local Hub."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from registry.hub_server import HubServer, HubState

from kvspill.manager.api import create_manager_app
from kvspill.manager.pull_jobs import PullJobs
from kvspill.manager.supervisor import Supervisor
from kvspill.registry import open_registry

from .conftest import API_KEY, wait_for

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def client(tmp_path: Path, tiny_llama_dir: Path) -> Iterator[TestClient]:
    state = HubState(repos={"org/tiny": {p.name: p for p in tiny_llama_dir.iterdir()}})
    registry = open_registry(tmp_path / "data")
    with HubServer(state) as url:
        pulls = PullJobs(registry, cache_dir=tmp_path / "hf-cache", endpoint=url)
        supervisor = Supervisor(tmp_path / "logs", tmp_path / "data")
        app = create_manager_app(registry, supervisor, API_KEY, _free_port(), pulls=pulls)
        with TestClient(app) as c:
            yield c


def _job(client: TestClient, job_id: str) -> dict:
    return dict(client.get(f"/api/jobs/{job_id}", headers=AUTH).json())


def test_a_pull_job_registers_the_model_with_its_progress(client: TestClient, tiny_llama_dir: Path):
    job = client.post("/api/pull", headers=AUTH, json={"model": "org/tiny"}).json()
    assert job["state"] == "running" and job["model"] == "org/tiny"
    wait_for("the pull", lambda: _job(client, job["id"])["state"] != "running", 60)
    done = _job(client, job["id"])
    assert done["state"] == "done", done
    weights = sum(p.stat().st_size for p in tiny_llama_dir.glob("*.safetensors"))
    assert done["total_bytes"] >= weights and done["done_bytes"] == done["total_bytes"]
    names = [m["name"] for m in client.get("/api/models", headers=AUTH).json()["models"]]
    assert done["registered"] in names
    assert [j["id"] for j in client.get("/api/jobs", headers=AUTH).json()["jobs"]] == [job["id"]]


def test_a_failed_pull_says_why_and_a_bad_reference_is_refused(client: TestClient):
    job = client.post("/api/pull", headers=AUTH, json={"model": "org/missing"}).json()
    wait_for("the pull", lambda: _job(client, job["id"])["state"] != "running", 60)
    failed = _job(client, job["id"])
    assert failed["state"] == "failed" and "org/missing" in failed["error"]
    bad = client.post("/api/pull", headers=AUTH, json={"model": "not a model"})
    assert bad.status_code == 400 and "org/name" in bad.json()["error"]["message"]
    assert client.get("/api/jobs/nope", headers=AUTH).status_code == 404
    assert client.post("/api/pull", json={"model": "org/tiny"}).status_code == 401
