"""The dashboard page and its vendored files, under the manager and read-only under `kvspill serve`."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient

from kvspill.dashboard.page import STATIC_FILES, dashboard_router
from kvspill.server import ServerSettings, create_app


def _config(html: str) -> dict:
    found = re.search(r'<script id="config" type="application/json">(.*?)</script>', html, re.S)
    assert found is not None
    return dict(json.loads(found.group(1)))


def test_serve_shows_the_read_only_page_without_the_key():
    def no_engine() -> None:
        raise AssertionError("the page must not need the engine")

    app = create_app(no_engine, ServerSettings("fake", api_key="k"))  # type: ignore[arg-type]
    client = TestClient(app)  # no lifespan: the engine never starts
    page = client.get("/ui")
    assert page.status_code == 200
    config = _config(page.text)
    assert config["mode"] == "serve" and config["sources"]["kv"] == "/v1/kv?kvspill_poll=1"
    assert 'id="profile-form"' not in page.text  # no control under `kvspill serve`
    for name in STATIC_FILES:
        assert client.get(f"/ui/static/{name}").status_code == 200
    assert client.get("/ui/static/pages.py", headers={"Authorization": "Bearer k"}).status_code == 404
    assert client.get("/v1/kv").status_code == 401  # the data still needs the key


def test_vendored_uplot_is_pinned_and_licensed():
    from kvspill.dashboard.page import HERE

    head = (HERE / "static" / "uPlot.iife.min.js").read_text()[:80]
    assert "uPlot (v1.6.32)" in head
    assert "MIT" in (HERE / "static" / "uPlot.LICENSE").read_text()


def test_manager_page_has_the_controls():
    from fastapi import FastAPI

    app = FastAPI()
    app.include_router(dashboard_router("manager"))
    page = TestClient(app).get("/").text
    assert _config(page)["sources"]["status"] == "/api/status"
    for element in (
        "profile-form",
        "show-plan",
        "chart-vram",
        "chart-latency",
        "kv-requests",
        "chat-form",
        "chat-stop",
        "logs",
        "models",
        "add-model-form",
        "servers",
        "chart-cpu",
        "chart-ram",
    ):
        assert f'id="{element}"' in page


def test_serve_logs_show_the_servers_lines_not_the_pages_polling():
    import logging

    def no_engine() -> None:
        raise RuntimeError("no engine in this test")

    access = logging.getLogger("uvicorn.access")
    level = access.level
    access.setLevel(logging.INFO)  # as uvicorn's logging config sets it
    app = create_app(no_engine, ServerSettings("fake", api_key="k"))  # type: ignore[arg-type]
    try:
        with TestClient(app) as client:  # the lifespan attaches the ring
            logging.getLogger("kvspill.test").warning("hello from the server")
            line = '%s - "%s %s HTTP/%s" %d'
            access.info(line, "127.0.0.1:1", "GET", "/v1/kv?kvspill_poll=1", "1.1", 200)
            access.info(line, "127.0.0.1:1", "GET", "/health", "1.1", 200)
            access.info(line, "127.0.0.1:1", "POST", "/v1/chat/completions", "1.1", 200)
            lines = client.get("/logs", headers={"Authorization": "Bearer k"}).json()["lines"]
            assert client.get("/logs").status_code == 401  # the log is behind --api-key
            bad = client.get("/logs?lines=0", headers={"Authorization": "Bearer k"})
        logging.getLogger("kvspill.test").warning("after the app stopped")
    finally:
        access.setLevel(level)
    assert any("hello from the server" in x for x in lines)
    assert any("POST /v1/chat/completions" in x for x in lines)
    assert not any("kvspill_poll" in x or "/health" in x for x in lines)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "lines"
    from kvspill.server.log_ring import LogRing

    assert not any(isinstance(h, LogRing) for h in logging.getLogger().handlers)  # detached at stop
