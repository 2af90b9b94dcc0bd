"""The app in-process (uvicorn on a thread, loopback) over a real engine on the tiny Llama (CPU),
for the fault and abuse suite: one per module, with the settings the module needs."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from kvspill.config import EngineConfig
from kvspill.server import ServerSettings, create_app


@dataclass
class AppServer:
    url: str
    app: Any
    server: uvicorn.Server
    thread: threading.Thread


def serve_in_thread(
    factory: Callable[[], Any], settings: ServerSettings, **uvicorn_options: Any
) -> AppServer:
    app = create_app(factory, settings)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **uvicorn_options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not (server.started and app.state.engine.wait_ready(0.05)):
        assert time.monotonic() < deadline, "the in-process server did not start"
        time.sleep(0.02)
    return AppServer(f"http://127.0.0.1:{port}", app, server, thread)


def stop_in_thread(s: AppServer) -> None:
    s.server.should_exit = True
    s.thread.join(10)


def tiny_engine_factory(model_dir: Path, **options: Any) -> Callable[[], Any]:
    def factory() -> Any:
        from kvspill.engine.core import LLMEngine

        return LLMEngine(EngineConfig(model=str(model_dir), device="cpu", **options))

    return factory


@pytest.fixture(scope="module")
def tiny_app(tiny_llama_dir: Path) -> Iterator[AppServer]:
    """A keyless loopback server (Host allow-list on) with a 64 KiB body limit."""
    settings = ServerSettings(
        "tiny", max_request_bytes=64 * 1024, allowed_hosts={"localhost", "127.0.0.1", "::1"}
    )
    s = serve_in_thread(tiny_engine_factory(tiny_llama_dir), settings)
    yield s
    stop_in_thread(s)
