"""Which web pages may call the server from a browser (CORS), vLLM's `--allowed-origins`.

Without CORS headers a browser app on another origin (a chat UI on http://localhost:3000) cannot
read an answer, and its JSON requests never leave the browser (the preflight fails). With `*` on
a server without a key, any page the user opens could read the model and the RAG routes' files,
so the default is Ollama's: pages served from this machine's loopback names (any port, http or
https); `--allowed-origins` names others ("*": any, as vLLM's default).

Invariants:
- The preflight (OPTIONS) is answered before the API key is checked (browsers send no key on
  it); the real request still needs the key. The Host check stays outermost (`app.py`).
- Any method and header may follow an allowed origin; credentials (cookies) are never allowed:
  a key travels in the Authorization header, not a cookie.
"""

from __future__ import annotations

import json

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

LOOPBACK_ORIGINS = r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?$"


def parse_origins(text: str | None) -> tuple[str, ...] | None:
    """`--allowed-origins`: a JSON list (vLLM's form, '["https://a.example"]') or comma-separated
    origins; None: the loopback default. Raises ValueError naming a value that is not an origin."""
    if text is None or not text.strip():
        return None
    stripped = text.strip()
    values = json.loads(stripped) if stripped.startswith("[") else stripped.split(",")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(
            f"--allowed-origins takes origins like https://app.example,http://localhost:3000; got {text!r}"
        )
    origins = tuple(v.strip().rstrip("/") for v in values if v.strip())
    bad = next((o for o in origins if o != "*" and "://" not in o), None)
    if bad is not None:
        raise ValueError(
            f"--allowed-origins: {bad!r} is not an origin: give scheme and host, like https://{bad} "
            "(or * for any page)"
        )
    return origins


def add_cors(app: FastAPI, origins: tuple[str, ...] | None) -> None:
    """The CORS middleware for `origins` (None: this machine's loopback pages)."""
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins or ()),
        allow_origin_regex=LOOPBACK_ORIGINS if origins is None else None,
        allow_methods=["*"],
        allow_headers=["*"],
        allow_credentials=False,
    )
