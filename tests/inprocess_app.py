"""The server's app in this process, without a server process: over a real LLMEngine through a
TestClient (ready once /health answers 200), or any app under uvicorn on a thread (`served`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from kvspill.engine.core import LLMEngine
from kvspill.server import ServerSettings, create_app

LOAD_TIMEOUT_S = 60


@contextmanager
def loaded_client(
    engine_options: dict[str, Any], api_key: str | None = None, headers: dict[str, str] | None = None
) -> Iterator[TestClient]:
    """A TestClient of an app named "tiny" whose engine is `LLMEngine(**engine_options)`, loaded."""
    app = create_app(lambda: LLMEngine(**engine_options), ServerSettings(model_name="tiny", api_key=api_key))
    with TestClient(app, headers=headers) as client:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the engine did not load"
            time.sleep(0.1)
        yield client


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """`app` under uvicorn on a thread, on a free loopback port: its base URL while the block runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
