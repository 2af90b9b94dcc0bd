"""The server's app in this process over a real LLMEngine, for tests that drive its routes through a
TestClient without a server process: ready once /health answers 200."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
