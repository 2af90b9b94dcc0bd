"""Headless Chromium on two pages the operator's kit serves, both in this process (uvicorn on a
thread, no child server): the manager dashboard's Results history per model, and the log pane
of `kvspill serve`'s own `/ui` page over the tiny random Llama.

Skips, as `test_dashboard_browser.py` does, without Playwright for Python or a Chromium binary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from kvspill.manager.api import create_manager_app
from kvspill.manager.supervisor import Supervisor
from kvspill.registry import ModelEntry, open_registry
from kvspill.registry.results import record_result
from kvspill.server import ServerSettings, create_app

from .conftest import API_KEY
from .test_dashboard_browser import _chromium, _free_port

pytestmark = pytest.mark.slow
SERVE_KEY = "serve-key"


def _run(app: Any, log_level: str) -> tuple[str, uvicorn.Server, threading.Thread]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline, "the in-process server did not start"
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, thread


def _stop(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield b
        b.close()


def _page(browser: Any, url: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.console_errors = []
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    page.goto(url)
    return page


PROGRESSIVE = {"largest_stable_ctx": 1024, "decode_tok_s": {"512": 30.0, "1024": 25.5}, "failed_ctx": None}


@pytest.fixture(scope="module")
def manager_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A manager whose registry has `tiny` with two kept runs (the older one under tiny's source,
    as `kvspill bench progressive --model tiny` records it) and `empty` with none."""
    tmp = tmp_path_factory.mktemp("results-manager")
    registry = open_registry(tmp)
    source = str(tmp / "tiny-files")
    registry.add_model(ModelEntry("tiny", source, "hf_dir", "safetensors", "float32", 1 << 20, 0.0))
    registry.add_model(ModelEntry("empty", str(tmp / "empty-files"), "hf_dir", "safetensors", None, 1, 0.0))
    record_result(registry, source, "progressive", PROGRESSIVE, passed=True, host="box-a")
    newer = {**PROGRESSIVE, "largest_stable_ctx": 512, "decode_tok_s": {"512": 31.0}, "failed_ctx": 1024}
    record_result(registry, "tiny", "progressive", newer, passed=False, profile="tiny-cpu", host="box-b")
    app = create_manager_app(registry, Supervisor(tmp / "logs", tmp), API_KEY, _free_port())
    url, server, thread = _run(app, "warning")
    yield url
    _stop(server, thread)


def test_results_history_per_model(browser: Any, manager_url: str):
    page = _page(browser, f"{manager_url}/#key={API_KEY}")
    requests: list[str] = []

    def seen(request: Any) -> None:
        if "/api/results" in request.url:
            requests.append(request.url)

    page.on("request", seen)
    page.wait_for_selector("#results tbody tr >> nth=1")  # the newest run's model is selected
    assert page.input_value("#results-model") == "tiny"
    assert "tiny (2 results)" in page.inner_text("#results-model")
    rows = [page.inner_text(f"#results tbody tr >> nth={i}").split("\t") for i in range(2)]
    assert page.locator("#results tbody tr").count() == 2
    # newest first: date, suite, profile, host, verdict, the headline `bench history` prints
    assert rows[0][1:] == [
        "progressive",
        "tiny-cpu",
        "box-b",
        "FAIL",
        "largest stable 512 tok, decode 31 tok/s at 512, failed at 1024",
    ]
    assert rows[1][1:] == [
        "progressive",
        "-",
        "box-a",
        "pass",
        "largest stable 1024 tok, decode 25.5 tok/s at 1024",
    ]
    assert page.is_visible("#results-trend canvas")
    assert page.get_attribute("#results-trend", "data-points") == "2"
    assert "decode tok/s" in page.inner_text("#results-trend-figure")

    settled = len(requests)
    page.wait_for_timeout(2500)  # two ticks and a log refresh: the results are not polled
    assert len(requests) == settled

    page.select_option("#results-model", "empty")
    page.wait_for_selector("#results-empty:not([hidden])")
    assert "kvspill bench all --model empty" in page.inner_text("#results-empty")
    assert page.is_hidden("#results") and page.is_hidden("#results-trend-figure")

    page.click("#models tr[data-model='tiny'] button.show-results")  # from the model's row
    page.wait_for_selector("#results tbody tr >> nth=1")
    assert page.input_value("#results-model") == "tiny" and page.is_hidden("#results-empty")
    assert page.console_errors == []
    page.close()


@pytest.fixture(scope="module")
def serve_url(tiny_llama_dir: Path) -> Iterator[str]:
    """`kvspill serve`'s app on the tiny Llama, with uvicorn's logging as `serve` runs it (info)."""
    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {
        n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers), logging.getLogger(n).propagate)
        for n in names
    }

    def factory() -> Any:
        from kvspill.config import EngineConfig
        from kvspill.engine.core import LLMEngine

        return LLMEngine(EngineConfig(model=str(tiny_llama_dir), device="cpu"))

    app = create_app(factory, ServerSettings("tiny", api_key=SERVE_KEY))
    url, server, thread = _run(app, "info")
    try:
        assert app.state.engine.wait_ready(120), "the tiny engine did not load"
        yield url
    finally:
        _stop(server, thread)
        for n, (level, handlers, propagate) in saved.items():  # uvicorn's dictConfig, undone
            logger = logging.getLogger(n)
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate = propagate


def test_ui_log_pane_shows_the_servers_lines_not_its_polling(browser: Any, serve_url: str):
    page = _page(browser, f"{serve_url}/ui#key={SERVE_KEY}")
    page.wait_for_function("() => Number(document.getElementById('chart-kv').dataset.samples) >= 2")
    auth = {"Authorization": f"Bearer {SERVE_KEY}"}
    assert httpx.get(f"{serve_url}/health").status_code == 200
    done = httpx.post(
        f"{serve_url}/v1/completions",
        json={"model": "tiny", "prompt": "hello", "max_tokens": 2},
        headers=auth,
    )
    assert done.status_code == 200, done.text
    page.wait_for_function(
        "() => document.getElementById('logs').textContent.includes('POST /v1/completions')", timeout=10_000
    )
    logs = page.inner_text("#logs")
    assert "Application startup complete" in logs  # the server's own lines, not only access lines
    for polling in ("kvspill_poll", "GET /v1/kv", "GET /metrics", "GET /logs", "GET /health"):
        assert polling not in logs, (polling, logs)
    assert page.console_errors == []
    page.close()
