"""The RAG routes over HTTP: the openai client against /v1/embeddings, /embed, /precache/repo,
/search, /stats in process (kvspill embed-serve's app), and `kvspill serve --rag` as a real
process beside the LLM routes."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.server.rag_app import create_rag_app

from .conftest import numbered_lines, write_repo


@pytest.fixture
def client(real_service: RagService) -> Iterator[TestClient]:
    with TestClient(create_rag_app(real_service, api_key="k"), headers={"Authorization": "Bearer k"}) as c:
        yield c


def test_openai_client_embeddings(client: TestClient, real_service: RagService) -> None:
    openai = pytest.importorskip("openai")
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key="k", http_client=client, max_retries=0)
    texts = ["hello world", "def foo(): return 1"]
    want = real_service.embedder.encode(texts)
    num_tokens = sum(len(ids) for ids in real_service.embedder.tokenizer(texts)["input_ids"])
    for encoding_format in ("float", "base64"):
        out = oa.embeddings.create(model="all-MiniLM-L6-v2", input=texts, encoding_format=encoding_format)
        if encoding_format == "base64":  # asked for explicitly, the client hands the text back
            got = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in out.data])
        else:
            got = np.array([d.embedding for d in out.data], dtype=np.float32)
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert out.usage.prompt_tokens == out.usage.total_tokens == num_tokens
    # the client's default asks for base64 and decodes it itself
    default = oa.embeddings.create(model="sentence-transformers/all-MiniLM-L6-v2", input="hello world")
    np.testing.assert_allclose(default.data[0].embedding, want[0], atol=1e-6)
    ids = real_service.embedder.tokenizer(texts, add_special_tokens=False)["input_ids"]
    by_ids = oa.embeddings.create(model="all-MiniLM-L6-v2", input=ids, encoding_format="float")
    np.testing.assert_allclose(np.array([d.embedding for d in by_ids.data]), want, atol=1e-5)
    one = oa.embeddings.create(model="all-MiniLM-L6-v2", input=ids[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, want[0], atol=1e-5)
    with pytest.raises(openai.BadRequestError, match="not trained to be shortened"):
        oa.embeddings.create(model="all-MiniLM-L6-v2", input="x", dimensions=128)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        oa.embeddings.create(model="text-embedding-3-small", input="x")


def test_embed_precache_search_stats(client: TestClient, real_service: RagService) -> None:
    root = real_service.allowed_root
    write_repo(
        root / "repo", {"a.py": numbered_lines("apple", 12), "b.py": "def banana_split():\n    return 1\n"}
    )
    first = client.post("/embed", json={"texts": ["hello", "hello", "bye"]}).json()
    assert first["cached"] == [False, False, False] and first["dim"] == 384
    assert client.post("/embed", json={"texts": "hello"}).json()["cached"] == [True]
    report = client.post("/precache/repo", json={"path": "repo", "include": ["*.py"]}).json()
    assert report["num_files"] == 2 and report["num_chunks_embedded"] == report["num_chunks"] == 2
    hits = client.post("/search", json={"query": "banana_split function", "top_k": 2}).json()["results"]
    assert hits[0]["path"] == "b.py" and (hits[0]["start_line"], hits[0]["end_line"]) == (1, 2)
    assert hits[0]["score"] > hits[1]["score"] and hits[0]["fused_score"] > hits[1]["fused_score"]
    stats = client.get("/stats").json()
    assert stats["entries"] == 2 + 2 + 1  # two texts, two chunks, one query
    # hits: the second /embed; misses: three texts (a duplicate is embedded once, counted twice),
    # two chunks, one query
    assert stats["hits"] == 1 and stats["misses"] == 6 and stats["bytes"] > 0
    assert stats["chunks"] == 2 and stats["embeddings_per_s"] > 0
    dense = client.post("/search", json={"query": "banana_split function", "mode": "dense"}).json()["results"]
    assert [h["path"] for h in dense] == ["b.py", "a.py"] and dense[0]["fused_score"] is None


@pytest.mark.parametrize(
    ("route", "body", "status", "param", "message"),
    [
        ("/v1/embeddings", {"input": []}, 400, "input", "empty"),
        ("/v1/embeddings", {"input": ["ok", ""]}, 400, "input", "input 1 is empty"),
        ("/v1/embeddings", {"input": "x" * 200_001}, 400, "input", "200001 characters"),
        ("/v1/embeddings", {"input": [[1, 99999]]}, 400, "input", "outside the vocabulary"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 400, "encoding_format", ""),
        ("/v1/embeddings", {"input": 3}, 400, "input", ""),
        ("/embed", {"texts": []}, 400, "texts", "empty"),
        ("/precache/repo", {"path": "/etc"}, 403, "path", "outside the directories this server may index"),
        ("/precache/repo", {"path": "../"}, 403, "path", "outside the directories this server may index"),
        ("/precache/repo", {"path": "latin1"}, 400, "path", "not UTF-8"),
        ("/precache/repo", {"path": "big"}, 400, "path", "byte limit"),
        ("/precache/repo", {"path": "empty"}, 400, "path", "empty"),
        ("/precache/repo", {"path": ".", "chunk_lines": 5, "overlap_lines": 5}, 400, "overlap_lines", ""),
        ("/search", {"query": ""}, 400, "query", "empty"),
        ("/search", {"query": "x", "top_k": 0}, 400, "top_k", ""),
        ("/search", {"query": "x", "mode": "bm25"}, 400, "mode", ""),
    ],
)
def test_bad_inputs_are_clear_400s(
    client: TestClient,
    real_service: RagService,
    route: str,
    body: dict,
    status: int,
    param: str,
    message: str,
) -> None:
    root = real_service.allowed_root
    write_repo(root, {"latin1/a.txt": b"caf\xe9\n", "big/a.txt": "x\n" * 1_500_000, "empty/a.txt": ""})
    response = client.post(route, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    expected_type = "permission_error" if status == 403 else "invalid_request_error"
    assert error["type"] == expected_type and error["param"] == param
    assert message in error["message"]


def test_auth_and_malformed_json(client: TestClient) -> None:
    assert client.get("/health", headers={"Authorization": ""}).status_code == 200
    assert client.get("/stats", headers={"Authorization": "Bearer wrong"}).status_code == 401
    bad = client.post("/embed", content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"]["message"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_kvspill_serve_mounts_the_rag_routes(tiny_llama_dir: Path, embedder: object, tmp_path: Path) -> None:
    write_repo(tmp_path / "root" / "repo", {"m.py": "def mango():\n    return 'fruit'\n"})
    big = {f"mod{i}.py": numbered_lines(f"mod{i}", 40) for i in range(100)}  # 300 chunks: minutes
    write_repo(tmp_path / "root" / "big", big)
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "kvspill",
        "serve",
        str(tiny_llama_dir),
        "--device",
        "cpu",
        "--port",
        str(port),
        "--shutdown-timeout",
        "3",
    ]
    cmd += ["--rag", "--rag-db", str(tmp_path / "rag.sqlite3"), "--rag-root", str(tmp_path / "root")]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    log = tmp_path / "server.log"
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, log)
        embedded = httpx.post(
            url + "/v1/embeddings", json={"input": "mango", "model": "all-MiniLM-L6-v2"}, timeout=60
        )
        assert len(embedded.json()["data"][0]["embedding"]) == 384
        report = httpx.post(url + "/precache/repo", json={"path": "repo"}, timeout=60).json()
        assert report["num_chunks"] == 1
        hits = httpx.post(url + "/search", json={"query": "mango"}, timeout=60).json()["results"]
        assert hits[0]["path"] == "m.py"
        completion = httpx.post(
            url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=60
        )
        assert completion.status_code == 200, completion.text
        # SIGTERM during a long index: the job is cancelled (server/lifecycle.py's drain hooks)
        code, seconds = _sigterm_during_index(proc, url, log)
    finally:
        proc.terminate()
        proc.wait(30)
    assert code == 0 and seconds < 3 + 3, f"exit {code} after {seconds:.1f} s:\n{log.read_text()}"
    assert "cancelled 1 index job" in log.read_text()


def _sigterm_during_index(proc: subprocess.Popen, url: str, log: Path) -> tuple[int, float]:
    """Start indexing "big" as a job, SIGTERM the server once it embeds: (exit code, seconds to exit)."""
    job = httpx.post(url + "/precache/repo", json={"path": "big", "async": True}, timeout=30).json()
    _wait_for_phase(url, job["id"], "embedding", log)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    return code, time.monotonic() - start


def _wait_for_phase(url: str, job_id: str, phase: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/precache/jobs/{job_id}").json()["progress"]["phase"] != phase:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    pytest.fail(f"server did not become healthy:\n{log.read_text()}")


@pytest.mark.slow
def test_sigterm_stops_a_long_index_within_the_shutdown_timeout(embedder: object, tmp_path: Path) -> None:
    """Issue 48, item 8: an index kept `embed-serve` alive minutes after SIGTERM."""
    files = {f"pkg{i // 50}/mod{i}.py": numbered_lines(f"mod{i}", 40) for i in range(300)}  # 900 chunks
    write_repo(tmp_path / "root" / "big", files)
    port = _free_port()
    db = tmp_path / "rag.sqlite3"
    cmd = [sys.executable, "-m", "kvspill", "embed-serve", "--port", str(port), "--shutdown-timeout", "3"]
    cmd += ["--rag-db", str(db), "--rag-root", str(tmp_path / "root"), "--embedding-threads", "1"]
    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=dict(os.environ, HF_HUB_OFFLINE="1")
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, log)
        code, seconds = _sigterm_during_index(proc, url, log)
    finally:
        proc.kill()
        proc.wait(30)
    assert code == 0, log.read_text()
    # The timeout, then the batch being embedded and the interpreter's exit: 4.5 s was seen on a
    # loaded 2-core CI host. The bug this guards against kept the server alive for minutes.
    assert seconds < 3 + 3.0, f"exited {seconds:.1f} s after SIGTERM:\n{log.read_text()}"
    assert "cancelled 1 index job" in log.read_text()
    store = EmbeddingStore(db)
    assert store.repos("all-MiniLM-L6-v2") == [] and store.counts([])["entries"] < 900  # nothing swapped in
