"""`POST /v1/precache`: prefill a prompt prefix built from files and keep its KV blocks (kvspill/text/precache.py).

The client sends the files' text (the server reads nothing from its own disk): `files` as
`[{"path", "content"}]` with a `prompt_template` containing `{files}`, or a ready `prompt`. The
prefix runs as one request of a single output token through the same queue as every request; the
answer says how many tokens it has and how many later requests can find
(`{"prompt_tokens", "cached_tokens", "kept_tokens"}`); a question that starts with exactly the
same text then reports them as `usage.prompt_tokens_details.cached_tokens`.

With `"stream": true` the answer is server-sent events, since a large prefix prefills for minutes:
a `precache.progress` event at once and every PROGRESS_S (`prefilled_tokens` of `prompt_tokens`),
then one `precache.result` (the JSON answer's fields), then `data: [DONE]`.

Invariants:
- The status is decided before any byte is sent: a bad body or a refused request is the same 4xx
  or 503 JSON as without `stream`; a failure after that is an `error` event, then `[DONE]`.
- `prefilled_tokens` counts the KV blocks the request holds in every tier (prefix-cache hits
  included) times the block size, at most `prompt_tokens`, and never goes down: the scheduler
  allocates a chunk's blocks when it schedules it, so the count runs up to one chunk ahead of the
  computed tokens.
- A streaming client that goes away aborts the request (the stream's `finally`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from kvspill.errors import InvalidParameterError
from kvspill.server.async_engine import AsyncEngine, StepFailedError
from kvspill.server.errors import exception_response, exception_status
from kvspill.server.responses import sse
from kvspill.text.precache import DEFAULT_TEMPLATE, build_prompt, precache_params, result_of

PROGRESS_S = 0.5  # how often a streamed precache reports its prefill


class PrecacheFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Shown above the file's text in the prompt (### path)")
    content: str


class PrecacheBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    files: list[PrecacheFile] | None = None
    prompt_template: str = DEFAULT_TEMPLATE
    prompt: str | None = Field(None, description="The whole prefix text, instead of files")
    stream: bool = Field(
        False, description="Server-sent events: precache.progress while it prefills, then precache.result"
    )

    def text(self) -> str:
        if (self.files is None) == (self.prompt is None):
            raise InvalidParameterError("files", "send either `files` (with a `prompt_template`) or `prompt`")
        if self.prompt is not None:
            if not self.prompt:
                raise InvalidParameterError("prompt", "the prompt is empty")
            return self.prompt
        if not self.files:
            raise InvalidParameterError("files", "`files` is empty")
        return build_prompt([(f.path, f.content) for f in self.files], self.prompt_template)


def precache_router(ae: AsyncEngine) -> APIRouter:
    router = APIRouter(tags=["prefix cache"])

    @router.post("/v1/precache")
    async def precache(body: PrecacheBody) -> Response:
        try:
            if body.stream:
                return await _stream_response(ae, body.text())
            return JSONResponse(await _run(ae, body.text()))
        except Exception as e:  # KvspillError -> 4xx; anything else -> 500 for this request only
            return exception_response(e)

    return router


async def _stream_response(ae: AsyncEngine, text: str) -> Response:
    """Submit (raising as the JSON path does), then stream the progress and the result."""
    token_ids = await ae.call(lambda engine: engine.encode(text))  # the count progress is out of
    (req_id,), aq = await ae.submit_many([(token_ids, precache_params())])
    return StreamingResponse(
        _events(ae, req_id, aq, len(token_ids)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _prefilled(ae: AsyncEngine, req_id: str, num_tokens: int) -> int:
    stats = await ae.kv_stats()
    held = stats.requests.get(req_id)
    if held is None:  # still waiting for its first chunk
        return 0
    blocks = held.num_gpu_blocks + held.num_cpu_blocks + held.num_disk_blocks
    return min(blocks * stats.block_size, num_tokens)


def _progress(num_tokens: int, prefilled: int) -> str:
    return sse({"object": "precache.progress", "prompt_tokens": num_tokens, "prefilled_tokens": prefilled})


async def _events(ae: AsyncEngine, req_id: str, aq: asyncio.Queue, num_tokens: int) -> AsyncIterator[str]:
    finished = False
    prefilled = 0
    try:
        yield _progress(num_tokens, 0)
        while True:
            try:
                item = await asyncio.wait_for(aq.get(), PROGRESS_S)
            except TimeoutError:
                # The most seen so far: a lower count is a stale snapshot (the loop was mid-step)
                # or blocks between tiers, never a prefill going backwards.
                prefilled = max(prefilled, await _prefilled(ae, req_id, num_tokens))
                yield _progress(num_tokens, prefilled)
                continue
            if isinstance(item, BaseException) or item.finish_reason == "error":
                failure = item if isinstance(item, BaseException) else StepFailedError(item.error or "failed")
                finished = True
                yield sse(exception_status(failure)[1])
                break
            if item.finished:
                finished = True
                block_size = (await ae.kv_stats()).block_size
                result = result_of(len(item.prompt_token_ids), item.num_cached_tokens, block_size)
                yield _progress(num_tokens, num_tokens)
                yield sse({"object": "precache.result", **result.to_json()})
                break
        yield "data: [DONE]\n\n"
    finally:
        if not finished:
            ae.abort(req_id)


async def _run(ae: AsyncEngine, text: str) -> dict[str, Any]:
    (req_id,), aq = await ae.submit_many([(text, precache_params())])
    try:
        while True:
            item = await aq.get()
            if isinstance(item, BaseException):
                raise item
            if item.finished:
                break
    except BaseException:
        ae.abort(req_id)
        raise
    if item.finish_reason == "error":
        raise StepFailedError(item.error or "the precache request failed inside a step")
    block_size = (await ae.kv_stats()).block_size
    return result_of(len(item.prompt_token_ids), item.num_cached_tokens, block_size).to_json()
