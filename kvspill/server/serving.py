"""Completions and chat completions: one request through the AsyncEngine, JSON or SSE.

Invariants:
- The HTTP status is decided before any byte is sent: `submit` returns only once the engine
  accepted the request (or raised, which becomes a 4xx/503 body).
- A request whose client went away is aborted within a second: non-streaming handlers poll
  `is_disconnected()` every POLL_S; a cancelled stream aborts in its `finally`.
- Every stream chunk carries the same `id` and `created`; the last content chunk carries
  `finish_reason`; `include_usage` adds a `choices: []` chunk before `data: [DONE]`; `: ping`
  comments go out every PING_S while waiting for the first output.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from kvspill.outputs import RequestOutput
from kvspill.sampling_params import SamplingParams
from kvspill.server.async_engine import AsyncEngine, StepFailedError
from kvspill.server.errors import error_body, exception_response, exception_status

PING_S = 5.0
POLL_S = 0.25


@dataclass
class Job:
    """What one HTTP request asks of the engine, and how to shape the answer."""

    chat: bool
    model: str
    prompt: str | list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool
    tokenizer: Any  # TokenizerBundle or None

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.sent_logprobs = 0
        self.text_offset = 0


async def run_job(ae: AsyncEngine, job: Job, request: Request,
                  on_reject: Callable[[str], None] | None = None) -> Response:
    try:
        req_id, aq = await ae.submit(job.prompt, job.params)
    except Exception as e:  # noqa: BLE001 - mapped to the OpenAI error shape
        if on_reject is not None:
            on_reject(type(e).__name__)
        return exception_response(e)
    if job.stream:
        return StreamingResponse(_stream(ae, job, req_id, aq, request), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await _collect(ae, job, req_id, aq, request)


async def _next(aq: asyncio.Queue, timeout: float) -> Any:
    """The next item, or None after `timeout` seconds."""
    try:
        return await asyncio.wait_for(aq.get(), timeout)
    except TimeoutError:
        return None


async def _collect(ae: AsyncEngine, job: Job, req_id: str, aq: asyncio.Queue, request: Request) -> Response:
    waiting_first = True
    next_check = time.monotonic() + POLL_S
    try:
        while True:
            item = await _next(aq, POLL_S)
            if time.monotonic() >= next_check:  # outputs may arrive faster than POLL_S: check by time
                next_check = time.monotonic() + POLL_S
                if await request.is_disconnected():
                    ae.abort(req_id)
                    return Response(status_code=499)
            if item is None:
                continue
            if waiting_first:
                waiting_first = False
                ae.note_first_output()
            if isinstance(item, BaseException):
                return exception_response(item)
            if item.finished:
                break
    except asyncio.CancelledError:
        ae.abort(req_id)
        raise
    finally:
        if waiting_first:
            ae.note_first_output()
    if item.finish_reason == "error":
        return exception_response(StepFailedError(item.error or "the request failed inside a step"))
    return JSONResponse(_full_body(job, item))


async def _stream(ae: AsyncEngine, job: Job, req_id: str, aq: asyncio.Queue,
                  request: Request) -> AsyncIterator[str]:
    waiting_first, done = True, False
    try:
        if job.chat:
            yield _sse(_chunk(job, {"role": "assistant", "content": ""}, None, None))
        while True:
            item = await _next(aq, PING_S if waiting_first else POLL_S)
            if item is None:
                if await request.is_disconnected():
                    return
                if waiting_first:
                    yield ": ping\n\n"
                continue
            if waiting_first:
                waiting_first = False
                ae.note_first_output()
            if isinstance(item, BaseException):
                done = True
                yield _sse(exception_status(item)[1])
                break
            for event in _events(job, item):
                yield event
            if item.finished:
                done = True
                break
        yield "data: [DONE]\n\n"
    finally:
        if waiting_first:
            ae.note_first_output()
        if not done:
            ae.abort(req_id)


def _events(job: Job, out: RequestOutput) -> list[str]:
    if out.finish_reason == "error":
        return [_sse(error_body(out.error or "the request failed inside a step", "server_error", "server_error"))]
    events = []
    logprobs = _logprobs(job, out)
    if out.delta_text or out.finished or logprobs is not None:
        delta = {"content": out.delta_text} if job.chat else out.delta_text
        events.append(_sse(_chunk(job, delta, out.finish_reason if out.finished else None, logprobs)))
    if out.finished and job.include_usage:
        body = _base(job, "chat.completion.chunk" if job.chat else "text_completion")
        body["choices"] = []
        body["usage"] = _usage(out)
        events.append(_sse(body))
    return events


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _base(job: Job, obj: str) -> dict[str, Any]:
    return {"id": job.id, "object": obj, "created": job.created, "model": job.model}


def _chunk(job: Job, delta: Any, finish_reason: str | None, logprobs: Any) -> dict[str, Any]:
    if job.chat:
        body = _base(job, "chat.completion.chunk")
        body["choices"] = [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]
    else:
        body = _base(job, "text_completion")
        body["choices"] = [{"index": 0, "text": delta, "logprobs": logprobs, "finish_reason": finish_reason}]
    return body


def _usage(out: RequestOutput) -> dict[str, int]:
    return {"prompt_tokens": out.num_prompt_tokens, "completion_tokens": out.num_output_tokens,
            "total_tokens": out.num_prompt_tokens + out.num_output_tokens}


def _full_body(job: Job, out: RequestOutput) -> dict[str, Any]:
    logprobs = _logprobs(job, out)
    if job.chat:
        body = _base(job, "chat.completion")
        message = {"role": "assistant", "content": out.text}
        body["choices"] = [{"index": 0, "message": message, "logprobs": logprobs,
                            "finish_reason": out.finish_reason}]
    else:
        body = _base(job, "text_completion")
        body["choices"] = [{"index": 0, "text": out.text, "logprobs": logprobs,
                            "finish_reason": out.finish_reason}]
    body["usage"] = _usage(out)
    return body


def _tok(job: Job, token_id: int) -> str:
    if job.tokenizer is None:
        return f"<{token_id}>"
    return str(job.tokenizer.hf.decode([token_id]))


def _logprobs(job: Job, out: RequestOutput) -> dict[str, Any] | None:
    """Logprobs of the tokens not yet sent (all of them for a full body)."""
    if job.params.logprobs is None:
        return None
    new = out.logprobs[job.sent_logprobs:]
    job.sent_logprobs = len(out.logprobs)
    if not new and not out.finished:
        return None
    if job.chat:
        content = []
        for lp in new:
            token = _tok(job, lp.token_id)
            top = [{"token": (t := _tok(job, tid)), "logprob": v, "bytes": list(t.encode())} for tid, v in lp.top]
            content.append({"token": token, "logprob": lp.logprob, "bytes": list(token.encode()),
                            "top_logprobs": top})
        return {"content": content, "refusal": None}
    tokens, token_lps, tops, offsets = [], [], [], []
    for lp in new:
        token = _tok(job, lp.token_id)
        tokens.append(token)
        token_lps.append(lp.logprob)
        tops.append({_tok(job, tid): v for tid, v in lp.top} if job.params.logprobs else None)
        offsets.append(job.text_offset)
        job.text_offset += len(token)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
