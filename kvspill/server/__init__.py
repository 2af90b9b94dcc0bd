"""The OpenAI-compatible HTTP server: `create_app(factory, ServerSettings)` over one engine thread.

Invariants: this package may import the engine; the engine layers never import it (an
import-linter contract forbids fastapi/uvicorn/pydantic there). The package itself imports
nothing heavy: `ServerSettings` and `create_app` load fastapi on first use, so commands that only
need a helper module (`serve-ray`'s prefix router, `doctor`) run where fastapi is not installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kvspill.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'kvspill.server' has no attribute {name!r}")
