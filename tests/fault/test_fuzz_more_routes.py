"""Schema-driven fuzz of the routes beside the LLM API (issue 48, "Done when"): the RAG routes
(`kvspill embed-serve`'s app, which `kvspill serve --rag` mounts as is) and the manager's control
API. schemathesis generates valid and invalid requests from each app's own OpenAPI document and
calls the app in process (ASGI); no response may be a 5xx, and the app must answer afterwards.

The RAG app runs over a deterministic fake embedder (tests/rag/conftest.py): the routes, the
access policy, the jobs and the store are the real ones; only the model is cheap. The LLM API's
own fuzz run is tests/server/test_fuzz.py (a real server process).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from fuzz_cases import run_cases
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from kvspill.rag.access import AccessPolicy
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.server.rag_app import create_rag_app

from ..rag.conftest import FakeEmbedder, write_repo

pytestmark = pytest.mark.slow

KEY = "fuzz-key"
EXAMPLES_PER_MODE = 30


def _fuzz(app: Any, headers: dict[str, str], skip: set[str] = frozenset()) -> collections.Counter[str]:
    """Every operation of `app`'s schema, valid and invalid cases; raises on any 5xx."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=headers)
    counts: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.label in skip:
            continue
        has_input = operation.method.upper() in ("POST", "PUT", "DELETE") or bool(operation.path_parameters)
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if has_input else [GenerationMode.POSITIVE]
        for mode in modes:

            def on_case(case: Any) -> None:
                response = case.call(headers=headers)
                counts[case.operation.label] += 1
                try:
                    case.validate_response(response, checks=[not_a_server_error])
                except Exception as e:  # noqa: BLE001 - collect them all, report at the end
                    failures.append(f"{case.operation.label} {case.body!r} -> {response.status_code}: {e}")

            run_cases(operation, mode, EXAMPLES_PER_MODE, on_case)
    assert not failures, "\n".join(failures[:20])
    return counts


@pytest.fixture
def rag_app(tmp_path: Path) -> Iterator[Any]:
    root = write_repo(tmp_path / "root", {"proj/a.py": "def a():\n    return 1\n", "proj/b.md": "# b\n"})
    db = tmp_path / "rag.sqlite3"
    service = RagService(FakeEmbedder(), EmbeddingStore(db), AccessPolicy.create([root], db_path=db))
    service.precache_repo("proj")
    app = create_rag_app(service, api_key=KEY)
    with TestClient(app):  # runs the app's lifespan (the job runner)
        yield app


def test_fuzz_the_rag_routes(rag_app: Any) -> None:
    counts = _fuzz(rag_app, {"Authorization": f"Bearer {KEY}"})
    assert {"POST /v1/embeddings", "POST /embed", "POST /precache/repo", "POST /search", "GET /stats"} <= set(
        counts
    ), dict(counts)
    with TestClient(rag_app) as client:
        headers = {"Authorization": f"Bearer {KEY}"}
        assert client.post("/search", json={"query": "def a"}, headers=headers).status_code == 200
        assert client.get("/health").status_code == 200


def test_fuzz_the_manager_api(tmp_path: Path, smollm2_gguf_path: Path, tiny_llama_dir: Path) -> None:
    from kvspill.manager.api import create_manager_app
    from kvspill.manager.supervisor import Supervisor
    from kvspill.registry import open_registry

    from ..manager.conftest import make_registry

    registry_dir = make_registry(tmp_path / "registry", smollm2_gguf_path, tiny_llama_dir)
    supervisor = Supervisor(registry_dir / "logs", registry_dir, backoff_s=0.2, env={"OMP_NUM_THREADS": "1"})
    app = create_manager_app(open_registry(registry_dir), supervisor, KEY, 1)
    try:
        # starting a real server child per generated case would take minutes: start/restart are
        # covered by tests/manager/test_control_api.py
        skip = {"POST /api/serve/start", "POST /api/serve/restart", "POST /api/serve/switch"}
        counts = _fuzz(app, {"Authorization": f"Bearer {KEY}"}, skip)
        assert len(counts) >= 5, dict(counts)
    finally:
        supervisor.stop()
