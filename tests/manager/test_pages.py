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
    assert config["mode"] == "serve" and config["sources"]["kv"] == "/v1/kv"
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
        "logs",
    ):
        assert f'id="{element}"' in page
