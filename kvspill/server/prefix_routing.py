"""Replicas behind one router: which replica a request goes to, and calling a replica's app.

Prefix-hash-aware routing: a request's key is the start of its prompt (the chat messages' roles
and contents in order, or the completion prompt), cut at `prefix_chars`; requests whose prompts
share that start (a repeated repository context with different questions) hash to the same
replica, which holds that prefix's KV blocks in its prefix cache. The router has no tokenizer, so
the "first blocks" are counted in characters. A request without a prompt (GET /v1/models,
/health) goes to replica 0.

`call_asgi` runs one HTTP request through an ASGI app in this process and yields the ASGI
messages it sends (`http.response.start`, then `http.response.body` chunks): a replica hands
them to the router as they come, so a streamed completion stays streamed.

Invariants:
- The hash is stable across processes and hosts (sha256, never Python's salted `hash`).
- A body that is not JSON, or a prompt of another shape, still routes (to replica 0): the
  replica's app answers it with its own error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

DEFAULT_PREFIX_CHARS = 2048  # about 512 tokens: 32 blocks of 16


def prompt_prefix(body: bytes, prefix_chars: int = DEFAULT_PREFIX_CHARS) -> str | None:
    """The routing key of a request body (module docstring); None: no prompt."""
    try:
        payload = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    messages = payload.get("messages")
    if isinstance(messages, list):
        text = "".join(f"<{m.get('role')}>{m.get('content')}" for m in messages if isinstance(m, dict))
    elif "prompt" in payload:
        prompt = payload["prompt"]
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
    else:
        return None
    return text[:prefix_chars]


def pick_replica(body: bytes, num_replicas: int, prefix_chars: int = DEFAULT_PREFIX_CHARS) -> int:
    """The replica index in [0, num_replicas) for this request body."""
    key = prompt_prefix(body, prefix_chars)
    if key is None:
        return 0
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % num_replicas


async def call_asgi(
    app: Any, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes
) -> AsyncIterator[dict[str, Any]]:
    """Run one HTTP request through `app`; yield the messages it sends until the body ends."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    disconnected = asyncio.Event()
    sent_body = False
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": headers,
        "client": ("router", 0),
        "server": ("replica", 80),
    }

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()  # the app polls for a disconnect while it streams
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        await queue.put(message)

    task = asyncio.create_task(app(scope, receive, send))
    try:
        while True:
            getter = asyncio.create_task(queue.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:  # the app returned (or raised) without finishing a response
                getter.cancel()
                task.result()
                return
            message = getter.result()
            yield message
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                return
    finally:
        disconnected.set()  # the client left, or the response is complete
        if not task.done():
            await asyncio.wait({task}, timeout=5)
