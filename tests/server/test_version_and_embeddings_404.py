"""llama-server's `GET /version` (behind --api-key like every route, in the OpenAPI schema) and
`POST /v1/embeddings` on a server without --rag: a 404 in the OpenAI error shape that says how to
turn it on, replaced by the real route when the RAG routes are mounted. No engine is started."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from fastapi.testclient import TestClient

from kvspill.rag.access import AccessPolicy
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.server import ServerSettings, create_app
from kvspill.server.rag_routes import mount_rag

from ..rag.conftest import FakeEmbedder, write_repo


def _no_engine() -> None:
    raise AssertionError("these routes must not need the engine")


def test_version_answers_the_version_and_the_model_behind_the_key() -> None:
    app = create_app(_no_engine, ServerSettings("my-model", api_key="k"))  # type: ignore[arg-type]
    client = TestClient(app)  # no lifespan: the engine never starts
    assert client.get("/version").status_code == 401
    answer = client.get("/version", headers={"Authorization": "Bearer k"})
    assert answer.status_code == 200
    assert answer.json() == {"version": version("kvspill"), "model": "my-model"}
    assert "/version" in client.get("/openapi.json", headers={"Authorization": "Bearer k"}).json()["paths"]


def test_embeddings_without_rag_is_a_404_saying_to_start_with_rag() -> None:
    client = TestClient(create_app(_no_engine, ServerSettings("m")))  # type: ignore[arg-type]
    answer = client.post("/v1/embeddings", json={"input": "hello", "model": "m"})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "not_found"
    assert "start it with --rag" in error["message"] and "--rag-root DIR" in error["message"]
    assert "/v1/embeddings" not in client.get("/openapi.json").json()["paths"]  # no such API here
    assert client.post("/v1/embeddings", content=b"not json").status_code == 404  # whatever the body


def test_mounting_the_rag_routes_replaces_the_404(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "root", {"proj/a.py": "def a():\n    return 1\n"})
    db = tmp_path / "rag.sqlite3"
    service = RagService(FakeEmbedder(), EmbeddingStore(db), AccessPolicy.create([root], db_path=db))
    app = create_app(_no_engine, ServerSettings("m"))  # type: ignore[arg-type]
    mount_rag(app, service)
    client = TestClient(app)
    answer = client.post("/v1/embeddings", json={"input": ["hello", "world"]})
    assert answer.status_code == 200, answer.text
    assert [d["index"] for d in answer.json()["data"]] == [0, 1]
    assert "/v1/embeddings" in client.get("/openapi.json").json()["paths"]
