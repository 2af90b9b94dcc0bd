"""The RAG database under trouble (issue 48, items 9 and 10): one writer at a time across
processes, a writer killed mid-write, a damaged file at open and while serving, a locked
database, and `kvspill rag check | repair`."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvspill.cli import rag_cmd
from kvspill.rag.db_check import check_database
from kvspill.rag.errors import StoreBusyError
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore, text_hash

from .conftest import FakeEmbedder, numbered_lines, write_repo

_CHILD_WRITER = """
import sys
from pathlib import Path
import numpy as np
from kvspill.rag.store import EmbeddingStore, text_hash
store = EmbeddingStore(Path(sys.argv[1]))
batch = 0
while True:
    rows = [(text_hash(f"child {batch} {j}"), np.full(64, batch, np.float32)) for j in range(400)]
    store.put_vectors("m", rows, 0.0)
    print(batch, flush=True)  # acknowledged: put_vectors returned, the transaction committed
    batch += 1
"""


def _vector(i: int) -> np.ndarray:
    return np.full(64, -i, dtype=np.float32)


def test_a_writer_killed_mid_write_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "rag.sqlite3"
    store = EmbeddingStore(path)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    acknowledged: list[str] = []  # the child's committed batches, as it reports them
    assert child.stdout is not None
    reader = threading.Thread(target=lambda: acknowledged.extend(child.stdout or []))
    reader.start()
    keys = [text_hash(f"parent {i}") for i in range(60)]
    try:
        for i, key in enumerate(keys):
            store.put_vectors("m", [(key, _vector(i))], 0.0)  # interleaved with the child's batches
            if i == 30:
                deadline = time.monotonic() + 30
                while len(acknowledged) < 3 and time.monotonic() < deadline:
                    time.sleep(0.01)
                child.send_signal(signal.SIGKILL)  # the child spends its time inside write transactions
    finally:
        child.kill()
        child.wait(30)
        reader.join(30)
    assert len(acknowledged) >= 3
    store.close()
    reopened = EmbeddingStore(path)
    assert reopened.problem is None and check_database(path, full=True) is None
    found = reopened.get_vectors("m", keys)
    assert all(np.array_equal(found[k], _vector(i)) for i, k in enumerate(keys))
    child_keys = [text_hash(f"child {b} {j}") for b in range(len(acknowledged)) for j in range(400)]
    assert len(reopened.get_vectors("m", child_keys)) == len(child_keys)


def test_two_stores_on_one_file_write_one_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "rag.sqlite3"
    first, second = EmbeddingStore(path), EmbeddingStore(path, busy_timeout_s=0.3)
    with first._file_lock.held(1.0):  # `first` inside a write transaction, as another process would be
        start = time.monotonic()
        with pytest.raises(StoreBusyError, match="being written by another process"):
            second.put_vectors("m", [(b"k", _vector(1))], 0.0)
        assert 0.25 < time.monotonic() - start < 5.0
    waiting = threading.Thread(target=second.put_vectors, args=("m", [(b"k", _vector(2))], 0.0))
    with first._file_lock.held(1.0):
        waiting.start()
        time.sleep(0.1)
        assert waiting.is_alive()  # queued behind the lock, not failed
    waiting.join(5)
    assert np.array_equal(first.get_vectors("m", [b"k"])[b"k"], _vector(2))


def _real_database(path: Path) -> None:
    """A database of a few MiB with everything checkpointed into the main file."""
    store = EmbeddingStore(path)
    rng = np.random.default_rng(0)
    rows = [(text_hash(f"t{i}"), rng.standard_normal(384).astype(np.float32)) for i in range(3000)]
    store.put_vectors("m", rows, 0.0)
    store.close()  # the last connection: SQLite checkpoints and removes the WAL
    assert not Path(f"{path}-wal").exists()


@pytest.mark.parametrize("damage", ["random_bytes", "truncated", "garbled_pages"])
def test_a_damaged_database_is_moved_aside_at_open(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "rag.sqlite3"
    if damage == "random_bytes":
        path.write_bytes(os.urandom(100_000))
    else:
        _real_database(path)
        data = bytearray(path.read_bytes())
        if damage == "truncated":
            data = data[: len(data) // 2]
        else:
            data[200_000:260_000] = os.urandom(60_000)
        path.write_bytes(bytes(data))
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="kvspill.rag"):
        store = EmbeddingStore(path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "moved it aside" in warnings[0]
    assert store.moved_aside is not None and store.moved_aside.read_bytes() == before  # kept, not deleted
    assert store.moved_aside.name.startswith("rag.sqlite3.corrupt-")
    service = RagService(FakeEmbedder(), store, write_repo(tmp_path / "root", {"a.py": "apple = 1\n"}))
    assert service.precache_repo(".").num_chunks == 1 and service.search("apple")[0].path == "a.py"


def test_a_database_damaged_while_serving_fails_one_request_then_works(
    fake_service: RagService, caplog: pytest.LogCaptureFixture
) -> None:
    from fastapi.testclient import TestClient

    from kvspill.server.rag_app import create_rag_app

    write_repo(fake_service.allowed_root / "proj", {"a.py": numbered_lines("a", 300)})
    fake_service.precache_repo("proj")
    path = fake_service.store.path
    fake_service.store._db().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path.write_bytes(os.urandom(path.stat().st_size))  # another program wrote over it
    with TestClient(create_rag_app(fake_service)) as client, caplog.at_level(logging.WARNING):
        answers = []

        def stats() -> None:  # a fresh thread: its connection reads the file, not a warm cache
            answers.append(client.get("/stats"))

        thread = threading.Thread(target=stats)
        thread.start()
        thread.join()
        failed = answers[0]
        assert failed.status_code == 500
        assert failed.json()["error"]["code"] == "database_error"
        assert "not a database" in failed.json()["error"]["message"]
        later = client.get("/stats")
        assert later.status_code == 200 and later.json()["chunks"] == 0  # a fresh, empty database
        assert client.post("/precache/repo", json={"path": "proj"}).json()["num_chunks"] > 0
    assert any("moved it aside" in r.getMessage() for r in caplog.records)


def _lock_with_another_program(path: Path) -> sqlite3.Connection:
    """A connection that holds SQLite's write lock without our lock file (the sqlite3 shell)."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_locked_database_is_retried_then_a_503(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from kvspill.server.rag_app import create_rag_app

    path = tmp_path / "rag.sqlite3"
    store = EmbeddingStore(path, busy_timeout_s=2.0)
    other = _lock_with_another_program(path)
    threading.Timer(1.0, other.rollback).start()  # released past SQLite's own wait of 0.5 s
    start = time.monotonic()
    store.put_vectors("m", [(b"k", _vector(1))], 0.0)  # retried until the lock went
    assert 0.9 < time.monotonic() - start < 5.0

    service = RagService(FakeEmbedder(), EmbeddingStore(path, busy_timeout_s=0.4), tmp_path)
    other.execute("BEGIN IMMEDIATE")
    with TestClient(create_rag_app(service)) as client:
        busy = client.post("/embed", json={"texts": ["a text to cache"]})
        assert busy.status_code == 503 and busy.headers["retry-after"]
        assert busy.headers["content-type"] == "application/json"
        assert busy.json()["error"]["code"] == "database_locked"
        other.rollback()
        assert client.post("/embed", json={"texts": ["a text to cache"]}).status_code == 200
    other.close()


def _cli() -> tuple[CliRunner, object]:
    import typer

    app = typer.Typer()
    rag_cmd.register(app)
    return CliRunner(), app


def test_rag_check_and_repair(tmp_path: Path) -> None:
    runner, app = _cli()
    path = tmp_path / "rag.sqlite3"
    db = ["--rag-db", str(path)]
    missing = runner.invoke(app, ["rag", "check", *db])  # type: ignore[arg-type]
    assert missing.exit_code == 1 and "no database at" in missing.output
    _real_database(path)
    ok = runner.invoke(app, ["rag", "check", *db])  # type: ignore[arg-type]
    assert ok.exit_code == 0 and ok.output.startswith("ok:")
    sound = runner.invoke(app, ["rag", "repair", *db])  # type: ignore[arg-type]
    assert sound.exit_code == 0 and "nothing to repair" in sound.output
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    damaged = runner.invoke(app, ["rag", "check", *db])  # type: ignore[arg-type]
    assert damaged.exit_code == 1 and damaged.output.startswith("damaged:") and "rag repair" in damaged.output
    assert path.exists()  # check never moves anything
    repaired = runner.invoke(app, ["rag", "repair", *db])  # type: ignore[arg-type]
    assert (
        repaired.exit_code == 0 and "repaired:" in repaired.output and "moved it aside to" in repaired.output
    )
    assert len(list(tmp_path.glob("rag.sqlite3.corrupt-*"))) == 1
    assert runner.invoke(app, ["rag", "check", *db]).exit_code == 0  # type: ignore[arg-type]
