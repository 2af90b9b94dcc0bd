"""The RAG routes as one FastAPI router over a `RagService`: /v1/embeddings, /embed,
/precache/repo, /search, /stats. `kvspill serve --rag` includes it beside the LLM routes and
`kvspill embed-serve` serves it alone (`rag_app.py`).

Invariants:
- Model work runs in the thread pool, never on the event loop (the server keeps answering
  /health and the LLM routes while a repository is indexed).
- A bad input is a 400 in the OpenAI error shape naming `param`; a path outside the server's
  roots is a 403; an unknown `model` is a 404
  `model_not_found`; any other failure is that request's 500, never the server's end.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from kvspill.errors import InvalidParameterError
from kvspill.rag.service import RagService
from kvspill.server.errors import error_response, exception_response
from kvspill.server.rag_protocol import EmbeddingRequest, EmbedRequest, PrecacheRequest, SearchRequest

PACKAGED_ALIASES = {"sentence-transformers/all-MiniLM-L6-v2"}


async def _answer(fn: Callable[..., Any], *args: Any) -> Response:
    """`fn`'s JSON answer, run in the thread pool; an exception is this request's error response."""
    try:
        return JSONResponse(await run_in_threadpool(fn, *args))
    except Exception as e:  # KvspillError -> 4xx; anything else -> 500 for this request only
        return exception_response(e)


def _encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def rag_router(service: RagService) -> APIRouter:
    router = APIRouter(tags=["rag"])
    names = {service.model_name, *(PACKAGED_ALIASES if service.model_name == "all-MiniLM-L6-v2" else ())}

    def openai_embeddings(body: EmbeddingRequest) -> dict[str, Any]:
        if body.dimensions is not None and body.dimensions != service.embedder.dim:
            raise InvalidParameterError(
                "dimensions",
                f"{service.model_name} gives {service.embedder.dim}-dimensional vectors and was not "
                f"trained to be shortened: leave `dimensions` out or send {service.embedder.dim}",
            )
        texts, token_ids = body.texts_or_ids()
        if token_ids is not None:
            vectors = service.embed_token_ids(token_ids)
            num_tokens = sum(min(len(ids) + 2, service.embedder.max_seq_length) for ids in token_ids)
        else:
            assert texts is not None
            vectors = service.embed(texts).vectors
            num_tokens = sum(service.embedder.count_tokens(texts))
        data = [
            {"object": "embedding", "index": i, "embedding": _encode_vector(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        usage = {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
        return {"object": "list", "data": data, "model": service.model_name, "usage": usage}

    @router.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest) -> Response:
        if body.model is not None and body.model not in names:
            return error_response(
                404,
                f"The model `{body.model}` does not exist. This server embeds with `{service.model_name}`.",
                "invalid_request_error",
                "model_not_found",
                "model",
            )
        return await _answer(openai_embeddings, body)

    def embed_texts(body: EmbedRequest) -> dict[str, Any]:
        result = service.embed(body.text_list(), body.use_cache, param="texts")
        return {
            "model": service.model_name,
            "dim": service.embedder.dim,
            "embeddings": result.vectors.tolist(),
            "cached": result.cached,
        }

    @router.post("/embed")
    async def embed(body: EmbedRequest) -> Response:
        return await _answer(embed_texts, body)

    def precache(body: PrecacheRequest) -> dict[str, Any]:
        report = service.precache_repo(body.path, body.file_filter(), body.chunking(), body.allow_removal)
        return asdict(report)

    @router.post("/precache/repo")
    async def precache_repo(body: PrecacheRequest) -> Response:
        return await _answer(precache, body)

    def search_chunks(body: SearchRequest) -> dict[str, Any]:
        hits = service.search(body.query, body.top_k, body.repo)
        return {"model": service.model_name, "results": [asdict(h) for h in hits]}

    @router.post("/search")
    async def search(body: SearchRequest) -> Response:
        return await _answer(search_chunks, body)

    @router.get("/stats")
    async def stats() -> Response:
        return await _answer(service.stats)

    return router
