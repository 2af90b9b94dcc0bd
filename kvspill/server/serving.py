"""Completions and chat completions: one HTTP request through the AsyncEngine, JSON or SSE.

Invariants:
- The HTTP status is decided before any byte is sent: `submit_many` returns only once the engine
  accepted every request of the job (or raised, which becomes a 4xx/503 body).
- A job whose client went away is aborted within a second: non-streaming handlers poll
  `is_disconnected()` every POLL_S; a cancelled stream aborts in its `finally`. Whatever way a
  handler ends, the job's unfinished engine requests are aborted.
- A job with several choices (prompts x n) answers once all are finished (JSON) or interleaves
  their chunks, each with its `index` (SSE). One failed choice fails the job: the others are
  aborted. See `responses.py` for the shapes.
- `: ping` comments go out every PING_S while waiting for the first output.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from kvspill.server.async_engine import AsyncEngine, StepFailedError
from kvspill.server.errors import exception_response, exception_status
from kvspill.server.responses import Choice, Job, chunk, full_body, role_chunks, sse, usage_chunk

__all__ = ["Job", "run_job"]

PING_S = 5.0
POLL_S = 0.25


async def run_job(
    ae: AsyncEngine, job: Job, request: Request, on_reject: Callable[[str], None] | None = None
) -> Response:
    items = [(job.prompts[c.prompt_index], c.params) for c in job.choices]
    try:
        req_ids, aq = await ae.submit_many(items)
    except Exception as e:  # noqa: BLE001 - mapped to the OpenAI error shape
        if on_reject is not None:
            on_reject(type(e).__name__)
        return exception_response(e, "messages" if job.chat else "prompt")
    by_id = dict(zip(req_ids, job.choices, strict=True))
    if job.stream:
        return StreamingResponse(
            _stream(ae, job, by_id, aq, request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return await _collect(ae, job, by_id, aq, request)


async def _next(aq: asyncio.Queue, timeout: float) -> Any:
    """The next item, or None after `timeout` seconds."""
    try:
        return await asyncio.wait_for(aq.get(), timeout)
    except TimeoutError:
        return None


def _failure(item: Any) -> BaseException | None:
    """The error an item carries: an exception, or an output that finished with an error."""
    if isinstance(item, BaseException):
        return item
    if item.finish_reason == "error":
        return StepFailedError(item.error or "the request failed inside a step")
    return None


async def _collect(
    ae: AsyncEngine, job: Job, by_id: dict[str, Choice], aq: asyncio.Queue, request: Request
) -> Response:
    open_ids = set(by_id)
    next_check = time.monotonic() + POLL_S
    try:
        while open_ids:
            item = await _next(aq, POLL_S)
            if time.monotonic() >= next_check:  # outputs may arrive faster than POLL_S: check by time
                next_check = time.monotonic() + POLL_S
                if await request.is_disconnected():
                    return Response(status_code=499)
            if item is None:
                continue
            if (error := _failure(item)) is not None:
                return exception_response(error)
            if item.finished and item.req_id in open_ids:
                by_id[item.req_id].final = item
                open_ids.discard(item.req_id)
    finally:
        if open_ids:
            ae.abort(*open_ids)
    return JSONResponse(full_body(job))


async def _stream(
    ae: AsyncEngine, job: Job, by_id: dict[str, Choice], aq: asyncio.Queue, request: Request
) -> AsyncIterator[str]:
    open_ids = set(by_id)
    waiting_first = True
    try:
        if job.chat:
            for event in role_chunks(job):
                yield event
        while open_ids:
            item = await _next(aq, PING_S if waiting_first else POLL_S)
            if item is None:
                if await request.is_disconnected():
                    return
                if waiting_first:
                    yield ": ping\n\n"
                continue
            waiting_first = False
            if (error := _failure(item)) is not None:
                yield sse(exception_status(error)[1])
                break
            choice = by_id.get(item.req_id)
            if choice is None:
                continue
            if item.finished:
                choice.final = item
                open_ids.discard(item.req_id)
            if (text := chunk(job, choice, item)) is not None:
                yield text
        else:
            if job.include_usage:
                yield usage_chunk(job)
        yield "data: [DONE]\n\n"
    finally:
        if open_ids:
            ae.abort(*open_ids)
