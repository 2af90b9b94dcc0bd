"""The dashboard: one server-rendered page and its vendored, version-pinned static files.

Invariants:
- No build step: `static/` holds uPlot (1.6.32, MIT, `static/uPlot.LICENSE`) as published on npm
  and the dashboard's own script; nothing is fetched from a CDN.
- Imports nothing of kvspill, so `kvspill.server` can include the read-only page (`/ui`) and the
  manager the full one without either reaching the other; the page reads what its host serves.
- Only the files named in `STATIC_FILES` are served (no path from the URL reaches the disk).
- The page's own polling requests carry `POLL_QUERY` in their query string, so the log panes
  (the server's ring, the manager's capture of its child) can leave their access lines out.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

HERE = Path(__file__).parent
STATIC_FILES = {
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}
UI_PREFIX = "/ui"
# Marks the page's once-a-second requests in uvicorn's access lines (which show path and query).
POLL_QUERY = "kvspill_poll=1"
# The read-only page under `kvspill serve`: open like /health (the page holds no data; its
# script sends the key from the URL fragment `#key=...` to the routes that need one).
UI_OPEN_PATHS = frozenset({UI_PREFIX, *(f"{UI_PREFIX}/static/{name}" for name in STATIC_FILES)})

# Where the page's script reads each kind of data, relative to the page's host.
_SOURCES: dict[str, dict[str, str | None]] = {
    "manager": {
        "api": "/api",
        "system": "/api/system",
        "status": "/api/status",
        "kv": f"/api/child/v1/kv?{POLL_QUERY}",  # the manager passes the query on to its child
        "metrics": f"/api/child/metrics?{POLL_QUERY}",
        "chat": "/api/child/v1/chat/completions",
        "models": "/api/child/v1/models",
        "logs": "/api/logs?lines=200",
    },
    "serve": {
        "api": None,
        "system": None,
        "status": None,
        "kv": f"/v1/kv?{POLL_QUERY}",
        "metrics": f"/metrics?{POLL_QUERY}",
        "chat": "/v1/chat/completions",
        "models": "/v1/models",
        "logs": f"/logs?lines=200&{POLL_QUERY}",
    },
}


def _render(mode: str, static: str, url_prefix: str) -> str:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
    sources = {name: url_prefix + url if url else url for name, url in _SOURCES[mode].items()}
    config = {"mode": mode, "sources": sources}
    return env.get_template("dashboard.html").render(mode=mode, static=static, config=json.dumps(config))


def dashboard_router(mode: str, url_prefix: str = "") -> APIRouter:
    """`manager`: the full dashboard at `/`; `serve`: the read-only one at `/ui`. `url_prefix`
    (`kvspill serve --root-path`) goes before every URL the page itself names, so the page works
    behind the proxy that serves it under that prefix."""
    if mode not in _SOURCES:
        raise ValueError(f"mode must be one of {sorted(_SOURCES)}, not {mode!r}")
    page = "/" if mode == "manager" else UI_PREFIX
    static = "/static" if mode == "manager" else f"{UI_PREFIX}/static"
    router = APIRouter(include_in_schema=False)
    html = _render(mode, url_prefix + static, url_prefix)

    @router.get(page)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(html)

    @router.get(static + "/{name}")
    def static_file(name: str) -> Response:
        if name not in STATIC_FILES:
            return Response("not found", status_code=404)
        return FileResponse(HERE / "static" / name, media_type=STATIC_FILES[name])

    return router
