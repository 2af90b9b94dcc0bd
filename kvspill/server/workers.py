"""A bounded pool of worker threads for the text work of requests: tokenization, chat
templating, detokenization (/tokenize, /detokenize, prompts of completions and chats).

Why: on the event loop a 1 MB prompt's tokenization stalled /health for 43.8 s; on the engine
thread it stalled every stream. Hugging Face's fast tokenizers release the GIL while encoding,
so the pool's threads run beside both.

Invariants:
- At most `max_workers` jobs run and at most `max_pending` are admitted (running or queued); one
  more is refused at once with `ServerBusyError` (HTTP 503 + Retry-After), not queued without end.
- A job's exception reaches its caller unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from kvspill.server.admission import ServerBusyError

T = TypeVar("T")
DEFAULT_WORKERS = 2
PENDING_PER_WORKER = 32


class TextWorkers:
    def __init__(self, max_workers: int = DEFAULT_WORKERS, max_pending: int | None = None) -> None:
        self.max_workers = max_workers
        self.max_pending = max_pending if max_pending is not None else PENDING_PER_WORKER * max_workers
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="kvspill-text")
        self._pending = 0  # event-loop thread only

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on a worker thread; ServerBusyError when `max_pending` jobs are in already."""
        if self._pending >= self.max_pending:
            raise ServerBusyError(
                f"{self._pending} tokenization jobs are already queued (at most {self.max_pending}); retry later"
            )
        self._pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        finally:
            self._pending -= 1

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
