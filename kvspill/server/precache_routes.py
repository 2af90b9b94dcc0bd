"""`POST /v1/precache`: prefill a prompt prefix built from files and keep its KV blocks (kvspill/text/precache.py).

The client sends the files' text (the server reads nothing from its own disk): `files` as
`[{"path", "content"}]` with a `prompt_template` containing `{files}`, or a ready `prompt`. The
prefix runs as one request of a single output token through the same queue as every request; the
answer says how many tokens it has and how many later requests can find
(`{"prompt_tokens", "cached_tokens", "kept_tokens"}`); a question that starts with exactly the
same text then reports them as `usage.prompt_tokens_details.cached_tokens`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from kvspill.errors import InvalidParameterError
from kvspill.server.async_engine import AsyncEngine, StepFailedError
from kvspill.server.errors import exception_response
from kvspill.text.precache import DEFAULT_TEMPLATE, build_prompt, precache_params, result_of


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
            return JSONResponse(await _run(ae, body.text()))
        except Exception as e:  # KvspillError -> 4xx; anything else -> 500 for this request only
            return exception_response(e)

    return router


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
