"""The registry's database when it cannot answer (issue 48, item 10): a damaged file is one clear
error naming it, a locked one is retried then a RegistryUnavailableError, and the manager answers
both in JSON (503 with Retry-After for a lock, 500 for damage), never a plain-text 500."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvspill.registry import open_registry
from kvspill.registry import store as registry_store
from kvspill.registry.store import DB_FILE, RegistryUnavailableError


def test_a_damaged_registry_is_one_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / DB_FILE).write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(RegistryUnavailableError, match="cannot be read .*move the file aside") as e:
        open_registry(tmp_path)
    assert not e.value.busy and str(tmp_path / DB_FILE) in str(e.value)


def test_a_locked_registry_is_retried_then_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_registry(tmp_path).close()
    monkeypatch.setattr(registry_store, "BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(RegistryUnavailableError, match="stayed locked") as e:
            open_registry(tmp_path)
        assert e.value.busy
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    open_registry(tmp_path).close()  # free again: it opens


def test_the_manager_answers_a_locked_registry_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvspill.manager.api import create_manager_app
    from kvspill.manager.supervisor import Supervisor

    registry = open_registry(tmp_path)
    registry.db.execute("PRAGMA busy_timeout = 200")
    supervisor = Supervisor(tmp_path / "logs", tmp_path)
    app = create_manager_app(registry, supervisor, "k", 1)
    holder = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with TestClient(app) as client:
            r = client.get("/api/models", headers={"Authorization": "Bearer k"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "server_busy" and "locked" in r.json()["error"]["message"]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        supervisor.stop()
