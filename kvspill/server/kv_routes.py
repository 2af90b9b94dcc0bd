"""Cache management by prefix: `GET /v1/kv/prefixes`, `POST /v1/kv/lookup|pin|unpin|move|clear`.

LMCache's controller operations over kvspill's tiers (`kv/prefix_control.py`, docs/prefix_cache.md),
run on the engine thread between steps (`AsyncEngine.kv_control`). Behind `--api-key` like every
route but /health and /metrics; errors in OpenAI's shape.

Invariants:
- Status: an unknown prefix is 404 `prefix_not_found`; no room for a move or a pin past
  `--kv-pin-share` is 409 `kv_conflict` (the message says how much is free); a malformed body, a
  tier name that is not one or a tier this server lacks is 400; an engine without cache control
  (`KVCacheControl`) is 404. A refused operation changes nothing.
- Every call that reaches a handler counts once in `kvspill:kv_cache_ops_total{op, status}`.
- A text prompt is tokenized as a completion's is (`engine.encode`), on a text worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from kvspill.engine.client import KVCacheControl
from kvspill.errors import InvalidParameterError
from kvspill.prefix_records import KVConflictError, UnknownPrefixError
from kvspill.server.async_engine import AsyncEngine, EngineUnavailableError
from kvspill.server.errors import error_response, exception_response
from kvspill.server.metrics import ServerMetrics
from kvspill.server.workers import TextWorkers

_PREFIX = Field(min_length=1, description="A prefix's name, as GET /v1/kv/prefixes lists it")
_TIER = Field(description="gpu, cpu or disk (a tier this server has)")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # accepted as in every OpenAI route; the server serves one model


class LookupBody(_Body):
    prompt: str | list[int] = Field(description="Text (tokenized as a completion's prompt) or token ids")


class PinBody(_Body):
    prefix: str = _PREFIX
    tier: str = _TIER


class MoveBody(PinBody):
    partial: bool = Field(
        False, description="Move the leading blocks that fit instead of a 409 when not all do"
    )


class ClearBody(_Body):
    prefix: str | None = Field(None, min_length=1, description="The prefix to drop; or send all=true")
    all: bool = Field(False, description="Drop every cached prefix block (blocks in use stay)")
    persisted: bool = Field(False, description="Also delete their --kv-persist-dir files")


def kv_router(ae: AsyncEngine, metrics: ServerMetrics, workers: TextWorkers) -> APIRouter:
    router = APIRouter(tags=["KV cache management"])

    async def answer(op: str, run: Callable[[], Awaitable[Any]]) -> Response:
        try:
            response: Response = JSONResponse(await run())
        except Exception as e:  # noqa: BLE001 - each maps to its status; 500 for the unexpected
            response = _error_response(e)
        metrics.kv_op(op, response.status_code)
        return response

    @router.get("/v1/kv/prefixes")
    async def prefixes(block_ids: bool = False) -> Response:
        """The cached prefixes, most recently used first; `block_ids=true` adds their block ids per tier."""

        async def run() -> dict[str, Any]:
            rows = await ae.kv_control(lambda e: e.kv_prefixes())
            return {"object": "list", "data": [row.to_json(block_ids) for row in rows]}

        return await answer("prefixes", run)

    @router.post("/v1/kv/lookup")
    async def lookup(body: LookupBody) -> Response:
        """How many leading tokens of a prompt the tiers hold, per tier, and the prefix it matches."""

        async def run() -> dict[str, Any]:
            ids = await _token_ids(ae, workers, body.prompt)
            return (await ae.kv_control(lambda e: e.kv_lookup(ids))).to_json()

        return await answer("lookup", run)

    @router.post("/v1/kv/pin")
    async def pin(body: PinBody) -> Response:
        """Move a prefix to a tier (what can move) and keep it from eviction there."""
        return await answer("pin", _op(ae, lambda e: e.kv_pin(body.prefix, body.tier)))

    @router.post("/v1/kv/unpin")
    async def unpin(body: PinBody) -> Response:
        return await answer("unpin", _op(ae, lambda e: e.kv_unpin(body.prefix, body.tier)))

    @router.post("/v1/kv/move")
    async def move(body: MoveBody) -> Response:
        """Move a prefix's cached blocks to a tier now (blocks it pins elsewhere are copied)."""
        return await answer("move", _op(ae, lambda e: e.kv_move(body.prefix, body.tier, body.partial)))

    @router.post("/v1/kv/clear")
    async def clear(body: ClearBody) -> Response:
        """Drop one prefix's cached blocks (`prefix`) or every one (`all: true`)."""
        if (body.prefix is not None) != body.all:  # exactly one of them
            return await answer("clear", _op(ae, lambda e: e.kv_clear(body.prefix, body.persisted)))

        async def refuse() -> dict[str, Any]:
            raise InvalidParameterError("prefix", "send either `prefix` or `all: true`")

        return await answer("clear", refuse)

    return router


def _op(ae: AsyncEngine, fn: Callable[[KVCacheControl], Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def run() -> dict[str, Any]:
        return (await ae.kv_control(fn)).to_json()

    return run


async def _token_ids(ae: AsyncEngine, workers: TextWorkers, prompt: str | list[int]) -> list[int]:
    if not prompt:
        raise InvalidParameterError("prompt", "the prompt is empty")
    engine = ae.engine
    if engine is None or not ae.ready:
        raise EngineUnavailableError(ae.load_error or "the engine is still loading")
    if isinstance(prompt, list):  # ids past the vocabulary hash to no block, or overflow the hash
        bad = next((t for t in prompt if not 0 <= t < engine.vocab_size), None)
        if bad is not None:
            raise InvalidParameterError(
                "prompt", f"token id {bad} is outside the vocabulary [0, {engine.vocab_size})"
            )
        return prompt
    return await workers.run(engine.encode, prompt)


def _error_response(e: BaseException) -> JSONResponse:
    if isinstance(e, UnknownPrefixError):
        return error_response(404, str(e), "invalid_request_error", "prefix_not_found", "prefix")
    if isinstance(e, KVConflictError):
        return error_response(409, str(e), "invalid_request_error", "kv_conflict", "prefix")
    if isinstance(e, NotImplementedError):
        return error_response(404, str(e), "invalid_request_error", "not_supported")
    return exception_response(e)
