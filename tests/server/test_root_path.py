"""`kvspill serve --root-path /llm` (server/root_path.py): behind a proxy that strips the prefix
or passes it on, every route answers; the key's open paths stay open under the prefix; the /ui
page names its URLs with the prefix; a bad prefix is exit 2 before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.cli import serve_cmd
from kvspill.server import ServerSettings, create_app
from kvspill.server.root_path import normalize_root_path, route_path

from .test_inprocess import SlowEngine


def _client(**settings) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(SlowEngine, ServerSettings("fake", **settings)))


@pytest.mark.parametrize(
    ("given", "normal"), [("", ""), ("/", ""), ("/llm", "/llm"), ("/llm/", "/llm"), ("/a/b-c_1", "/a/b-c_1")]
)
def test_normalize(given, normal):
    assert normalize_root_path(given) == normal


@pytest.mark.parametrize("bad", ["llm", "//llm", "/l m", "/llm?x=1", "/llm#a", "/a%2fb"])
def test_a_prefix_that_is_not_a_url_path_is_refused(bad):
    with pytest.raises(ValueError, match="--root-path"):
        normalize_root_path(bad)


@pytest.mark.parametrize(
    ("path", "root", "seen"),
    [
        ("/llm/health", "/llm", "/health"),
        ("/health", "/llm", "/health"),
        ("/llmx/health", "/llm", "/llmx/health"),
        ("/llm", "/llm", "/"),
        ("/health", "", "/health"),
    ],
)
def test_route_path(path, root, seen):
    assert route_path({"path": path, "root_path": root}) == seen


def test_routes_answer_with_and_without_the_prefix():
    with _client(api_key="k", root_path="/llm") as client:
        key = {"Authorization": "Bearer k"}
        for path in ("/llm/v1/models", "/v1/models"):
            r = client.get(path, headers=key)
            assert r.status_code in (200, 503), (path, r.status_code, r.text)
            assert client.get(path).status_code == 401  # still keyed under the prefix
        for path in ("/llm/health", "/health", "/llm/ui"):
            assert client.get(path).status_code in (200, 503), path  # open paths stay open
        assert client.get("/other/v1/models", headers=key).status_code == 404


def test_the_page_and_the_docs_name_the_prefix():
    with _client(root_path="/llm") as client:
        page = client.get("/llm/ui").text
        assert '"/llm/v1/kv?' in page and "/llm/ui/static/dashboard.js" in page
        assert "/ui/static/dashboard.js" in client.get("/ui").text
        assert client.get("/llm/ui/static/dashboard.js").status_code == 200
        assert "/llm/openapi.json" in client.get("/llm/docs").text
    with _client() as client:
        page = client.get("/ui").text
        assert '"/v1/kv?' in page and '"/llm' not in page


def test_the_flag_reaches_the_server_and_a_bad_one_exits_2(monkeypatch, tiny_llama_dir: Path):
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    out = CliRunner().invoke(serve_app(), ["serve", str(tiny_llama_dir), "--root-path", "/llm/"])
    assert out.exit_code == 0, out.output
    assert calls[0][-1] == "/llm"
    out = CliRunner().invoke(
        serve_app(), ["serve", str(tiny_llama_dir), "--print-config"], env={"KVSPILL_ROOT_PATH": "llm"}
    )
    assert out.exit_code == 2 and "starts with one '/'" in out.output, out.output
