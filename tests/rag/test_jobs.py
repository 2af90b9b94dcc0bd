"""Index jobs (issue 48, item 8): progress, cancel by DELETE mid-walk and mid-embedding with the
index unchanged, the bounded queue, a client gone from a waiting POST, and the server's drain."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from kvspill.rag.errors import IndexCancelledError, JobsClosedError, JobsFullError
from kvspill.rag.jobs import IndexJobs
from kvspill.rag.service import EMBED_BATCH, RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.rag.types import IndexProgress, IndexReport
from kvspill.server.rag_app import _DrainingRagServer, create_rag_app
from kvspill.server.rag_routes import mount_rag

from .conftest import GatedEmbedder, numbered_lines, write_repo

NUM_FILES = 12  # 20 lines each: one chunk a file at the default chunking ...
LINES = 40  # ... 40 lines: three chunks (1-20, 16-35, 31-40): 36 chunks, two embedding batches


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[RagService, GatedEmbedder]]:
    embedder = GatedEmbedder()
    root = write_repo(
        tmp_path / "root", {f"proj/m{i}.py": numbered_lines(f"m{i}", LINES) for i in range(NUM_FILES)}
    )
    yield RagService(embedder, EmbeddingStore(tmp_path / "rag.sqlite3"), root), embedder
    embedder.allow(100)  # nothing left waiting on the gate


def _index_state(service: RagService) -> tuple[dict[str, bytes], int, int]:
    repo = str(service.allowed_root / "proj")
    return service.store.file_hashes(repo), service.store.num_chunks(repo), service.store.generation(repo)


def test_progress_advances_and_delete_mid_embedding_leaves_the_index(
    gated: tuple[RagService, GatedEmbedder],
) -> None:
    service, embedder = gated
    embedder.allow(2)
    service.precache_repo("proj")  # the index a cancelled re-index must leave as it is
    before = _index_state(service)
    for i in range(NUM_FILES):  # every file changes: all 36 chunks to embed again
        (service.allowed_root / f"proj/m{i}.py").write_text(numbered_lines(f"new{i}", LINES))
    with TestClient(create_rag_app(service)) as client:
        started = client.post("/precache/repo", json={"path": "proj", "async": True})
        assert started.status_code == 202
        job_id = started.json()["id"]
        assert started.headers["location"] == f"/precache/jobs/{job_id}"
        _wait_until(embedder.waiting.is_set)
        job = client.get(f"/precache/jobs/{job_id}").json()
        assert job["state"] == "running" and job["repo"] == "proj"
        assert job["progress"] == {
            "phase": "embedding",
            "num_files_listed": NUM_FILES,
            "num_files_read": NUM_FILES,
            "num_chunks_to_embed": 3 * NUM_FILES,
            "num_chunks_embedded": 0,
        }
        embedder.allow(1)
        _wait_until(
            lambda: client.get(f"/precache/jobs/{job_id}").json()["progress"]["num_chunks_embedded"] > 0
        )
        assert client.get(f"/precache/jobs/{job_id}").json()["progress"]["num_chunks_embedded"] == EMBED_BATCH
        _wait_until(embedder.waiting.is_set)  # inside the second batch
        cancelling = client.delete(f"/precache/jobs/{job_id}").json()
        assert cancelling["cancel_requested"] and cancelling["state"] == "running"
        embedder.allow(1)  # the batch in flight ends; the job stops at the next check
        _wait_until(lambda: client.get(f"/precache/jobs/{job_id}").json()["state"] == "cancelled")
        done = client.get(f"/precache/jobs/{job_id}").json()
        assert done["error"]["code"] == "job_cancelled" and done["report"] is None
        assert [j["id"] for j in client.get("/precache/jobs").json()["data"]] == [job_id]
        assert client.delete("/precache/jobs/nope").status_code == 404
    assert _index_state(service) == before  # files, chunks and generation as they were


class _CancelAfter(IndexProgress):
    """Cancels itself once `num_files_listed` reaches `at` (a DELETE arriving mid-walk)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def check(self) -> None:
        if self.num_files_listed >= self.at:
            self.request_cancel("cancelled mid-walk")
        super().check()


def test_a_cancel_mid_walk_or_mid_read_writes_nothing(tmp_path: Path) -> None:
    tree = {f"d{d}/f{f}.py": f"value_{d}_{f} = {f}\n" for d in range(10) for f in range(5)}
    root = write_repo(tmp_path / "root", tree)
    embedder = GatedEmbedder()
    service = RagService(embedder, EmbeddingStore(tmp_path / "rag.sqlite3"), root)
    progress = _CancelAfter(12)
    with pytest.raises(IndexCancelledError, match="mid-walk"):
        service.precache_repo(".", progress=progress)
    assert progress.phase == "listing" and 12 <= progress.num_files_listed < 50
    reading = IndexProgress()
    reading.request_cancel("before reading")  # also stops a walk at its first directory
    with pytest.raises(IndexCancelledError):
        service.precache_repo(".", progress=reading)
    assert service.store.file_hashes(str(root)) == {} and service.store.generation(str(root)) == 0
    assert embedder.embedded == []


def test_jobs_queue_is_bounded_and_keeps_recent_history() -> None:
    release = threading.Event()

    def slow(progress: IndexProgress) -> IndexReport:
        while not release.wait(0.01):
            progress.check()
        return IndexReport("r")

    jobs = IndexJobs(max_running=1, max_queued=1, max_history=2)
    running, queued = jobs.submit("r", slow), jobs.submit("r", slow)
    assert (running.state, queued.state) == ("running", "queued")
    with pytest.raises(JobsFullError, match="retry later"):
        jobs.submit("r", slow)
    assert jobs.cancel(queued.job_id, "no") is queued and queued.state == "cancelled"  # at once
    release.set()
    _wait_until(lambda: running.state == "done")
    for _ in range(3):
        jobs.submit("r", slow).done.result(5)
    assert len(jobs.list()) == 2  # the two most recent finished ones
    jobs.shutdown("stopping")
    with pytest.raises(JobsClosedError, match="stopping"):
        jobs.submit("r", slow)


def test_a_full_queue_is_a_503_with_retry_after(gated: tuple[RagService, GatedEmbedder]) -> None:
    service, embedder = gated
    app = FastAPI()
    mount_rag(app, service, IndexJobs(max_running=1, max_queued=1))
    with TestClient(app) as client:
        first = client.post("/precache/repo", json={"path": "proj", "async": True}).json()["id"]
        client.post("/precache/repo", json={"path": "proj", "async": True})
        full = client.post("/precache/repo", json={"path": "proj", "async": True})
        assert full.status_code == 503 and full.headers["retry-after"]
        assert full.json()["error"]["code"] == "too_many_jobs"
        bad = client.post("/precache/repo", json={"path": "/etc", "async": True})
        assert bad.status_code == 403  # checked before it is queued
        embedder.allow(100)
        _wait_until(lambda: client.get(f"/precache/jobs/{first}").json()["state"] == "done")
        report = client.get(f"/precache/jobs/{first}").json()["report"]
        assert report["num_chunks"] == 3 * NUM_FILES and report["num_files"] == NUM_FILES


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    """`create_rag_app` under uvicorn on a thread (kvspill embed-serve's server, in process)."""

    def __init__(self, service: RagService, shutdown_timeout: float = 5.0) -> None:
        self.app = create_rag_app(service)
        self.port = _free_port()
        config = uvicorn.Config(
            self.app, port=self.port, log_level="warning", timeout_graceful_shutdown=int(shutdown_timeout)
        )
        self.server = _DrainingRagServer(config, self.app)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _wait_until(lambda: self.server.started)
        self.url = f"http://127.0.0.1:{self.port}"

    def jobs(self) -> list[dict[str, Any]]:
        return httpx.get(self.url + "/precache/jobs").json()["data"]


def test_a_client_gone_from_a_waiting_post_cancels_its_job(gated: tuple[RagService, GatedEmbedder]) -> None:
    service, embedder = gated
    server = _Server(service)
    try:
        body = b'{"path": "proj"}'
        head = "POST /precache/repo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        with socket.create_connection(("127.0.0.1", server.port)) as client:
            client.sendall(head.encode() + body)
            _wait_until(embedder.waiting.is_set)  # its job is inside the first embedding batch
        _wait_until(lambda: server.jobs()[0]["cancel_requested"])
        embedder.allow(1)
        _wait_until(lambda: server.jobs()[0]["state"] == "cancelled")
        assert "disconnected" in server.jobs()[0]["error"]["message"]
        assert _index_state(service) == ({}, 0, 0)
        embedder.allow(100)
        report = httpx.post(server.url + "/precache/repo", json={"path": "proj"}, timeout=10)
        assert report.status_code == 200 and report.json()["num_chunks"] == 3 * NUM_FILES  # the old shape
    finally:
        server.server.should_exit = True
        server.thread.join(10)


def test_shutdown_cancels_running_jobs_and_answers_the_waiting_post(
    gated: tuple[RagService, GatedEmbedder],
) -> None:
    service, embedder = gated
    server = _Server(service, shutdown_timeout=3.0)
    answers: list[httpx.Response] = []
    waiting = threading.Thread(
        target=lambda: answers.append(
            httpx.post(server.url + "/precache/repo", json={"path": "proj"}, timeout=30)
        )
    )
    waiting.start()
    _wait_until(embedder.waiting.is_set)
    start = time.monotonic()
    server.server.should_exit = True  # what SIGTERM does
    _wait_until(lambda: server.app.state.rag_jobs.closed)
    embedder.allow(1)  # the batch in flight ends: the job stops at its next check
    server.thread.join(10)
    waiting.join(10)
    assert time.monotonic() - start < 3.0
    assert answers[0].status_code == 503 and answers[0].json()["error"]["code"] == "job_cancelled"
    assert "shutting down" in answers[0].json()["error"]["message"]
    assert [j.state for j in server.app.state.rag_jobs.list()] == ["cancelled"]
    assert _index_state(service) == ({}, 0, 0)
