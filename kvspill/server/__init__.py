"""The OpenAI-compatible HTTP server: `create_app(factory, ServerSettings)` over one engine thread.

Invariants: this package may import the engine; the engine layers never import it (an
import-linter contract forbids fastapi/uvicorn/pydantic there).
"""

from __future__ import annotations

from kvspill.server.app import ServerSettings, create_app

__all__ = ["ServerSettings", "create_app"]
