"""The RAG routes as one FastAPI router over a `RagService`: /v1/embeddings, /embed,
/precache/repo and its jobs, /search, /stats. `kvspill serve --rag` mounts it beside the LLM
routes and `kvspill embed-serve` serves it alone (`rag_app.py`), both through `mount_rag`.

Invariants:
- Model work runs in the thread pool or on a job's thread, never on the event loop (the server
  keeps answering /health and the LLM routes while a repository is indexed).
- `/precache/repo` is always a job (`rag/jobs.py`): with `"async": true` the answer is 202 and
  the job at once; without it the request waits for the job and answers its report as before,
  and a client that disconnects cancels its job. `GET /precache/jobs[/{id}]` shows jobs,
  `DELETE /precache/jobs/{id}` cancels one. Past the job queue's bound: 503 with Retry-After.
- On SIGTERM (`app.state.drain_hooks`) every job is cancelled at once and no new one admitted.
- A bad input is a 400 in the OpenAI error shape naming `param`; a path outside the server's
  roots is a 403; an unknown `model` is a 404 `model_not_found`; a database locked past its busy
  timeout is a 503 with Retry-After; any other failure (a damaged database included) is that
  request's 500 in the same JSON shape, never the server's end nor a plain-text body.
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from kvspill.errors import InvalidParameterError
from kvspill.rag.errors import IndexCancelledError, JobsClosedError, JobsFullError, StoreBusyError
from kvspill.rag.jobs import IndexJob, IndexJobs
from kvspill.rag.service import RagService
from kvspill.server.errors import error_body, error_response, exception_status
from kvspill.server.rag_protocol import EmbeddingRequest, EmbedRequest, PrecacheRequest, SearchRequest

PACKAGED_ALIASES = {"sentence-transformers/all-MiniLM-L6-v2"}
POLL_S = 0.25  # how often a waiting POST /precache/repo looks for its client gone
DELETE_WAIT_S = 1.0  # a DELETE answers once the job stopped, or after this with cancel_requested
RETRY_AFTER_S = "2"
CANCEL_DELETE = "cancelled by DELETE /precache/jobs/{id}"
CANCEL_DISCONNECT = "the client of POST /precache/repo disconnected"
CANCEL_SHUTDOWN = (
    "the server is shutting down: the index was cancelled with nothing written to it (the vectors "
    "embedded so far stay cached, so sending it again after the restart resumes where it stopped)"
)


def rag_error_status(e: BaseException) -> tuple[int, dict, dict[str, str] | None]:
    """(status, body, headers) of a request that failed with `e`: the RAG failures, else the
    server's mapping (`server/errors.py`)."""
    busy = {"Retry-After": RETRY_AFTER_S}
    if isinstance(e, StoreBusyError):
        return 503, error_body(str(e), "server_busy", "database_locked"), busy
    if isinstance(e, JobsFullError):
        return 503, error_body(str(e), "server_busy", "too_many_jobs"), busy
    if isinstance(e, JobsClosedError):
        return 503, error_body(str(e), "unavailable", "unavailable"), busy
    if isinstance(e, IndexCancelledError):
        if e.reason == CANCEL_SHUTDOWN:
            return 503, error_body(str(e), "unavailable", "job_cancelled"), busy
        return 409, error_body(str(e), "invalid_request_error", "job_cancelled"), None
    if isinstance(e, sqlite3.Error):
        message = (
            f"the RAG database failed on this request ({type(e).__name__}: {e}); it was checked and, if "
            "damaged, moved aside for an empty one: retry"
        )
        return 500, error_body(message, "server_error", "database_error"), None
    return exception_status(e)


def rag_error_response(e: BaseException) -> JSONResponse:
    status, body, headers = rag_error_status(e)
    return JSONResponse(body, status_code=status, headers=headers)


async def _answer(fn: Callable[..., Any], *args: Any) -> Response:
    """`fn`'s JSON answer, run in the thread pool; an exception is this request's error response."""
    try:
        return JSONResponse(await run_in_threadpool(fn, *args))
    except Exception as e:  # KvspillError -> 4xx; anything else -> 5xx for this request only
        return rag_error_response(e)


def _encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def job_body(job: IndexJob) -> dict[str, Any]:
    """A job as GET /precache/jobs/{id} shows it."""
    p = job.progress
    error = None
    if job.error is not None:  # the answer a waiting POST got (or would have): status and body
        status, body, _ = rag_error_status(job.error)
        error = {**body["error"], "status": status}
    return {
        "id": job.job_id,
        "object": "index_job",
        "state": job.state,
        "repo": job.repo,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "seconds": job.seconds,
        "cancel_requested": p.cancel.is_set(),
        "progress": {
            "phase": p.phase,
            "num_files_listed": p.num_files_listed,
            "num_files_read": p.num_files_read,
            "num_chunks_to_embed": p.num_chunks_to_embed,
            "num_chunks_embedded": p.num_chunks_embedded,
        },
        "report": asdict(job.report) if job.report is not None else None,
        "error": error,
    }


def _job_not_found(job_id: str) -> JSONResponse:
    return error_response(
        404,
        f"no index job {job_id!r}: it never existed or is older than the last jobs kept (GET /precache/jobs)",
        "invalid_request_error",
        "job_not_found",
        "job_id",
    )


async def _wait_for(job: IndexJob, request: Request, jobs: IndexJobs) -> bool:
    """Wait for `job`; whether it finished (False: its client went away and it was cancelled)."""
    done = asyncio.wrap_future(job.done)
    while True:
        finished, _ = await asyncio.wait({done}, timeout=POLL_S)
        if finished:
            return True
        if await request.is_disconnected():
            jobs.cancel(job.job_id, CANCEL_DISCONNECT)
            return False


def _precache_routes(router: APIRouter, service: RagService, jobs: IndexJobs) -> None:
    def submit(body: PrecacheRequest) -> IndexJob:
        repo, work = service.index_work(body.path, body.file_filter(), body.chunking(), body.allow_removal)
        return jobs.submit(repo, work)

    @router.post("/precache/repo")
    async def precache_repo(body: PrecacheRequest, request: Request) -> Response:
        try:
            job = await run_in_threadpool(submit, body)
        except Exception as e:  # a bad path or glob, a full queue: nothing was queued
            return rag_error_response(e)
        if body.run_async:
            headers = {"Location": f"/precache/jobs/{job.job_id}"}
            return JSONResponse(job_body(job), status_code=202, headers=headers)
        if not await _wait_for(job, request, jobs):
            return Response(status_code=499)
        if job.report is not None:
            return JSONResponse(asdict(job.report))
        assert job.error is not None
        return rag_error_response(job.error)

    @router.get("/precache/jobs")
    async def list_jobs() -> Response:
        return JSONResponse({"object": "list", "data": [job_body(j) for j in jobs.list()]})

    @router.get("/precache/jobs/{job_id}")
    async def get_job(job_id: str) -> Response:
        job = jobs.get(job_id)
        return JSONResponse(job_body(job)) if job is not None else _job_not_found(job_id)

    @router.delete("/precache/jobs/{job_id}")
    async def cancel_job(job_id: str) -> Response:
        job = jobs.cancel(job_id, CANCEL_DELETE)
        if job is None:
            return _job_not_found(job_id)
        await asyncio.wait({asyncio.wrap_future(job.done)}, timeout=DELETE_WAIT_S)
        return JSONResponse(job_body(job))


def _embedding_routes(router: APIRouter, service: RagService) -> None:
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


def rag_router(service: RagService, jobs: IndexJobs | None = None) -> APIRouter:
    """The routes over `service`; index jobs run in `jobs` (a fresh `IndexJobs` by default:
    `mount_rag` also cancels them on SIGTERM)."""
    router = APIRouter(tags=["rag"])
    _embedding_routes(router, service)
    _precache_routes(router, service, jobs if jobs is not None else IndexJobs())

    def search_chunks(body: SearchRequest) -> dict[str, Any]:
        hits = service.search(body.query, body.top_k, body.repo, body.mode)
        return {"model": service.model_name, "results": [asdict(h) for h in hits]}

    @router.post("/search")
    async def search(body: SearchRequest) -> Response:
        return await _answer(search_chunks, body)

    @router.get("/stats")
    async def stats() -> Response:
        return await _answer(service.stats)

    return router


def _drop_placeholders(app: FastAPI, router: APIRouter) -> None:
    """Remove `app`'s routes of a path and method that `router` serves: `create_app`'s
    /v1/embeddings (a 404 saying to start with --rag) would otherwise be matched first."""
    served = {(r.path, m) for r in router.routes if isinstance(r, APIRoute) for m in r.methods or ()}
    app.router.routes[:] = [
        r
        for r in app.router.routes
        if not (isinstance(r, APIRoute) and any((r.path, m) in served for m in r.methods or ()))
    ]


def mount_rag(app: FastAPI, service: RagService, jobs: IndexJobs | None = None) -> IndexJobs:
    """Add the RAG routes to `app` (in place of any route of the same path and method), and
    cancelling their index jobs to `app.state.drain_hooks` (run on SIGTERM by `server/lifecycle.py`
    and `rag_app.serve_rag`). Returns the jobs."""
    jobs = jobs if jobs is not None else IndexJobs()
    router = rag_router(service, jobs)
    _drop_placeholders(app, router)
    app.include_router(router)
    hooks = list(getattr(app.state, "drain_hooks", []))
    app.state.drain_hooks = [*hooks, lambda: jobs.shutdown(CANCEL_SHUTDOWN)]
    return jobs
