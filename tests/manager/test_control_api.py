"""The manager's control API over a REAL child `kvspill serve`: auth, plan, start, chat, switch,
crash restart with backoff, stop."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvspill.cli.plan_cmd import plan_json
from kvspill.manager.api import create_manager_app
from kvspill.manager.supervisor import Supervisor
from kvspill.options import EngineOptions
from kvspill.plan import flag_plans
from kvspill.registry import open_registry
from kvspill.registry.profiles import default_profile
from kvspill.registry.sources import inspect_source
from kvspill.registry.store import RegistryError

from .conftest import API_KEY, wait_for

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def client(registry_dir: Path) -> Iterator[TestClient]:
    supervisor = Supervisor(registry_dir / "logs", registry_dir, backoff_s=0.2, env={"OMP_NUM_THREADS": "1"})
    app = create_manager_app(open_registry(registry_dir), supervisor, API_KEY, _free_port())
    with TestClient(app) as c:  # leaving it runs the app's shutdown, which stops the child
        yield c


def test_every_api_route_needs_the_key(client: TestClient):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
        r = client.get("/api/models", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert client.post("/api/serve/stop").status_code == 401
    listing = client.get("/api/models", headers=AUTH).json()
    assert [m["name"] for m in listing["models"]] == ["smol", "tiny"]
    assert client.get("/").status_code == 200  # the page itself holds no data


def test_route_and_body_errors_have_the_error_shape(client: TestClient):
    """An unknown route, a wrong method and a JSON body sent without its Content-Type answer the
    `{"error": {...}}` shape every other error has, saying what to change."""
    missing = client.get("/api/nope", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "no route GET /api/nope"
    wrong = client.delete("/api/plan", headers=AUTH)
    assert wrong.status_code == 405 and "does not take DELETE" in wrong.json()["error"]["message"]
    body = b'{"name": "p", "model": "smol", "flags": {}}'
    untyped = client.post("/api/profiles", headers={**AUTH, "Content-Type": "text/plain"}, content=body)
    assert (
        untyped.status_code == 400 and "Content-Type: application/json" in untyped.json()["error"]["message"]
    )


def test_openapi_operation_ids_are_unique(client: TestClient):
    ops = [
        op["operationId"]
        for path in client.get("/openapi.json").json()["paths"].values()
        for op in path.values()
    ]
    assert len(ops) == len(set(ops)) and {"child_get", "child_post"} <= set(ops)


def test_plan_endpoint_returns_the_plan_json(
    client: TestClient, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # both plans read the host's available RAM: one reading for both, or they differ by the drift
    room = flag_plans.HostRoom(20 * 2**30, 100 * 2**30)
    monkeypatch.setattr(flag_plans, "read_host_room", lambda kv_disk_dir=None: room)
    r = client.post("/api/plan", headers=AUTH, json={"profile": "smol-cpu"})
    assert r.status_code == 200, r.text
    body = r.json()
    expected, _, _ = plan_json(str(smollm2_gguf_path), EngineOptions(device="cpu", max_model_len=512))
    assert {k: v for k, v in body.items() if k != "notes"} == expected
    assert body["context_len"] == 512 and set(body["plans"]) == {"default", "extended", "extreme", "yours"}
    form = client.post("/api/plan", headers=AUTH, json={"model": "smol", "flags": {"max_model_len": "1024"}})
    assert form.json()["context_len"] == 1024
    assert client.post("/api/plan", headers=AUTH, json={"profile": "nope"}).status_code == 404
    assert client.post("/api/plan", headers=AUTH, json={}).status_code == 400


def test_profiles_are_checked_before_saving(client: TestClient):
    bad = client.post(
        "/api/profiles", headers=AUTH, json={"name": "x", "model": "smol", "flags": {"block_size": 7}}
    )
    assert bad.status_code == 400 and "--block-size" in bad.json()["error"]["message"]
    assert client.post("/api/profiles", headers=AUTH, content=b"[1]").status_code == 400
    assert client.post("/api/serve/start", headers=AUTH, json={"profile": "nope"}).status_code == 404
    assert client.post("/api/serve/switch", headers=AUTH, json={"profile": "tiny-cpu"}).status_code == 409
    # what the engine refuses only at load is refused at save time, with its message (issue 53)
    offload = {"name": "x", "model": "smol", "flags": {"device": "cpu", "cpu_offload_gb": "2"}}
    refused = client.post("/api/profiles", headers=AUTH, json=offload)
    assert refused.status_code == 400 and "--cpu-offload-gb moves weights off a CUDA GPU" in refused.text
    huge = {"name": "x", "model": "smol", "flags": {"cpu_kv_budget": "100TiB"}}
    assert "of RAM available" in client.post("/api/profiles", headers=AUTH, json=huge).text
    assert "x" not in [p["name"] for p in client.get("/api/models", headers=AUTH).json()["profiles"]]
    assert client.post("/api/serve/start", headers=AUTH, json={}).status_code == 400
    assert client.post("/api/serve/start", headers=AUTH, json={"model": "nope"}).status_code == 404


def test_a_model_without_a_profile_gets_its_default_one(tmp_path: Path, tiny_llama_dir: Path):
    registry = open_registry(tmp_path)
    registry.add_model(inspect_source(str(tiny_llama_dir), "tiny"))
    first = default_profile(registry, "tiny")
    assert (first.name, first.model_name, first.flags) == ("tiny-default", "tiny", {})
    assert default_profile(registry, "tiny") == first  # saved once, then found
    with pytest.raises(RegistryError, match="no model named"):
        default_profile(registry, "nope")


def _status(client: TestClient) -> dict:
    return dict(client.get("/api/status", headers=AUTH).json())


def _running(client: TestClient, profile: str) -> bool:
    s = _status(client)
    return bool(s["state"] == "running" and s["profile"] == profile)


@pytest.mark.slow
def test_start_chat_switch_crash_restart_and_stop(client: TestClient):
    assert client.post("/api/serve/start", headers=AUTH, json={"profile": "smol-cpu"}).status_code == 200
    assert client.get("/api/child/v1/kv", headers=AUTH).status_code == 409  # still loading
    wait_for("smol-cpu to serve", lambda: _running(client, "smol-cpu"))
    chat = {"model": "smol", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}
    r = client.post("/api/child/v1/chat/completions", headers=AUTH, json=chat)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    assert client.get("/api/child/v1/completions", headers=AUTH).status_code == 404  # not forwarded
    assert "tiers" in client.get("/api/child/v1/kv", headers=AUTH).json()

    first_pid = _status(client)["pid"]
    assert client.post("/api/serve/switch", headers=AUTH, json={"profile": "tiny-cpu"}).status_code == 200
    wait_for("the switch to tiny-cpu", lambda: _running(client, "tiny-cpu"))
    assert client.get("/api/child/v1/models", headers=AUTH).json()["data"][0]["id"] == "tiny"
    with pytest.raises(ProcessLookupError):
        os.kill(first_pid, 0)  # the old server is gone

    crashed = _status(client)["pid"]
    os.kill(crashed, signal.SIGKILL)
    wait_for("the crash to be seen", lambda: _status(client)["restarts"] == 1, 30)
    wait_for("the restart", lambda: _running(client, "tiny-cpu") and _status(client)["pid"] != crashed)
    status = _status(client)
    assert status["last_exit_code"] == -signal.SIGKILL
    logs = client.get("/api/logs?lines=2000", headers=AUTH).json()["lines"]
    assert any("exited with code -9" in line for line in logs)
    assert any("engine ready" in line for line in logs)  # the child's own output is captured
    assert client.get("/api/logs?lines=0", headers=AUTH).status_code == 400

    pid = status["pid"]
    assert client.post("/api/serve/stop", headers=AUTH).json()["state"] == "stopped"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert client.get("/api/child/v1/kv", headers=AUTH).status_code == 409
