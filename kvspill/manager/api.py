"""The manager's control API: registry, pulls, plan, start/stop/switch of the child, logs,
monitoring, the servers already running on the host.

Invariants:
- Every `/api/*` route needs `Authorization: Bearer <key>` (compared in constant time); the
  dashboard page and its static files are open (they hold no data).
- Errors are `{"error": {"message", "type"}}` with 400 (bad input), 401, 404 (unknown name),
  409 (nothing started) or 502 (the child did not answer); a failing request never stops the
  manager or the child.
- `/api/child/...` forwards a fixed set of the child's routes (its KV, metrics, models and chat
  completions) with the child's key, so the browser needs neither the child's port nor its key;
  a streamed chat streams through (`forward.py`).
- A profile is checked (`validate_flags`: what `serve` checks before loading) when it is saved and
  again when it is started; a model started without a profile gets its default one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from kvspill.dashboard.page import dashboard_router
from kvspill.errors import KvspillError
from kvspill.manager.discovery import discover
from kvspill.manager.forward import forward
from kvspill.manager.pull_jobs import PullJobs
from kvspill.manager.supervisor import ChildSpec, Supervisor
from kvspill.monitor.gpu import open_gpu_source
from kvspill.monitor.sampler import Sampler
from kvspill.options import EngineOptions, engine_kwargs
from kvspill.plan.flag_plans import plans_for_flags
from kvspill.plan.units import parse_bytes
from kvspill.registry.profiles import default_profile, validate_flags
from kvspill.registry.results import list_results, result_models
from kvspill.registry.sources import inspect_source
from kvspill.registry.store import Registry, RegistryError, RegistryUnavailableError, unavailable
from kvspill.server.limits import http_error_message

CHILD_ROUTES = {"v1/kv": "GET", "metrics": "GET", "v1/models": "GET", "v1/chat/completions": "POST"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class AddModel(BaseModel):
    source: str
    name: str | None = None


class SaveProfile(BaseModel):
    name: str
    model: str
    flags: dict[str, Any] = Field(default_factory=dict)
    replace: bool = False


class PlanQuery(BaseModel):
    profile: str | None = None
    model: str | None = None  # a registered model name (with `flags`), when no profile
    flags: dict[str, Any] = Field(default_factory=dict)


class ServeRequest(BaseModel):
    profile: str | None = None
    model: str | None = None  # a registered model: started with its default profile


class PullRequest(BaseModel):
    model: str  # org/name, org/name:TAG or org/name/file.gguf, as `kvspill pull` takes it


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def create_manager_app(
    registry: Registry,
    supervisor: Supervisor,
    api_key: str,
    serve_port: int,
    *,
    probe_ports: list[int] | None = None,
    pulls: PullJobs | None = None,
) -> FastAPI:
    """`probe_ports`: where `/api/servers` looks for running servers (besides `serve_port`);
    `pulls`: the pull jobs (default: through huggingface_hub's own cache and endpoint)."""
    http = httpx.AsyncClient()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        # Here, not after uvicorn.run: uvicorn re-raises SIGTERM once it has shut down, so code
        # after it never runs and the child would outlive the manager.
        await asyncio.to_thread(supervisor.stop)
        await http.aclose()

    app = FastAPI(title="kvspill manager", lifespan=lifespan)
    key = api_key.encode()
    sampler = Sampler(*open_gpu_source())

    def auth(request: Request) -> None:
        header = request.headers.get("authorization", "")
        token = header[7:] if header[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(token.encode(), key):
            raise ApiError(
                401, "missing or wrong API key: send Authorization: Bearer <key>", "authentication_error"
            )

    _add_error_handlers(app, registry)
    app.include_router(dashboard_router("manager"))
    _add_registry_routes(app, registry, auth)
    _add_results_routes(app, registry, auth)
    _add_pull_routes(app, pulls if pulls is not None else PullJobs(registry), auth)
    _add_serve_routes(app, registry, supervisor, auth, api_key, serve_port)
    _add_monitor_routes(app, registry, supervisor, sampler, auth)
    _add_child_routes(app, supervisor, auth, api_key, http)
    _add_discovery_routes(app, auth, api_key, serve_port, probe_ports or [])
    return app


def _add_error_handlers(app: FastAPI, registry: Registry) -> None:
    """Every error as the OpenAI-shaped JSON the server's routes answer (never a plain-text 500)."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.message, e.kind)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, e: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        if request.method == "POST" and "json" not in content_type:
            # FastAPI reads a body only as JSON: without the header a JSON object is "missing"
            sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
            return _error(
                400,
                f"send the body as JSON with Content-Type: application/json ({sent})",
                "invalid_request_error",
            )
        where = ".".join(str(p) for p in e.errors()[0].get("loc", ()) if p != "body") or "body"
        return _error(
            400, f"{where}: {e.errors()[0].get('msg')} (send a JSON object)", "invalid_request_error"
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return _error(e.status_code, http_error_message(request, e), kind)

    @app.exception_handler(KvspillError)
    async def user_error(request: Request, e: KvspillError) -> JSONResponse:
        if isinstance(e, RegistryUnavailableError):
            status = 503 if e.busy else 500
            headers = {"Retry-After": "1"} if e.busy else None
            kind = "server_busy" if e.busy else "server_error"
            return JSONResponse({"error": {"message": str(e), "type": kind}}, status, headers)
        not_found = isinstance(e, RegistryError) and str(e).startswith("no ")
        return _error(
            404 if not_found else 400, str(e), "not_found_error" if not_found else "invalid_request_error"
        )

    @app.exception_handler(sqlite3.Error)
    async def registry_error(request: Request, e: sqlite3.Error) -> JSONResponse:
        return await user_error(request, unavailable(registry.path, e))  # JSON, never a plain-text 500


def _add_registry_routes(app: FastAPI, registry: Registry, auth: Any) -> None:
    guard = [Depends(auth)]

    @app.get("/api/models", dependencies=guard)
    def models() -> dict[str, Any]:
        return {
            "models": [m.to_json() for m in registry.listed_models()],
            "profiles": [p.to_json() for p in registry.profiles()],
        }

    @app.post("/api/models", dependencies=guard)
    def add_model(body: AddModel) -> dict[str, Any]:
        return registry.add_model(inspect_source(body.source, body.name)).to_json()

    @app.delete("/api/models/{name:path}", dependencies=guard)
    def remove_model(name: str) -> dict[str, Any]:
        registry.remove_model(name)
        return {"removed": name}

    @app.post("/api/profiles", dependencies=guard)
    def save_profile(body: SaveProfile) -> dict[str, Any]:
        flags = validate_flags(body.flags)
        return registry.save_profile(body.name, body.model, flags, replace=body.replace).to_json()

    @app.post("/api/plan", dependencies=guard)
    def plan(body: PlanQuery) -> dict[str, Any]:
        if body.profile is not None:
            profile = registry.profile(body.profile)
            model_name, flags = profile.model_name, {**profile.flags, **body.flags}
        elif body.model is not None:
            model_name, flags = body.model, body.flags
        else:
            raise ApiError(400, "give `profile`, or `model` (a registered name) with `flags`")
        source = registry.model(model_name).source
        payload, _, header = plans_for_flags(source, engine_kwargs(EngineOptions(**validate_flags(flags))))
        return {**payload, "notes": header}


def _add_results_routes(app: FastAPI, registry: Registry, auth: Any) -> None:
    @app.get("/api/results", dependencies=[Depends(auth)])
    def results(model: str | None = None, suite: str | None = None, limit: int = 50) -> dict[str, Any]:
        """The benchmark-suite summaries the registry keeps (`kvspill bench history`), newest
        first: one model's history for the dashboard with `?model=` (a registered name also finds
        the runs that recorded its source, as `bench --model NAME` does); `models`: every model
        with kept results."""
        entry = registry.find_model(model) if model is not None else None
        names = None if model is None else [model] if entry is None else [model, entry.source]
        rows = list_results(registry, names, suite, limit)
        return {"results": [r.to_json() for r in rows], "models": result_models(registry)}


def _add_pull_routes(app: FastAPI, pulls: PullJobs, auth: Any) -> None:
    guard = [Depends(auth)]

    @app.post("/api/pull", dependencies=guard)
    def pull(body: PullRequest) -> dict[str, Any]:
        return pulls.start(body.model.strip()).to_json()

    @app.get("/api/jobs", dependencies=guard)
    def jobs() -> dict[str, Any]:
        return {"jobs": [j.to_json() for j in pulls.jobs()]}

    @app.get("/api/jobs/{job_id}", dependencies=guard)
    def job(job_id: str) -> dict[str, Any]:
        return pulls.get(job_id).to_json()


def _profile_to_start(registry: Registry, body: ServeRequest) -> str:
    """The profile `body` names, or the default one of the model it names; checked as serve would."""
    if body.profile is not None:
        name = body.profile
    elif body.model is not None:
        name = default_profile(registry, body.model).name
    else:
        raise ApiError(
            400,
            "give `profile` (a saved profile) or `model` (a registered model, started with its default profile)",
        )
    validate_flags(registry.profile(name).flags)  # a bad profile fails here, not in the child
    return name


def _add_serve_routes(
    app: FastAPI, registry: Registry, supervisor: Supervisor, auth: Any, api_key: str, serve_port: int
) -> None:
    guard = [Depends(auth)]

    @app.post("/api/serve/start", dependencies=guard)
    def start(body: ServeRequest) -> dict[str, Any]:
        supervisor.start(ChildSpec(_profile_to_start(registry, body), serve_port, api_key=api_key))
        return supervisor.snapshot()

    @app.post("/api/serve/switch", dependencies=guard)
    def switch(body: ServeRequest) -> dict[str, Any]:
        profile = _profile_to_start(registry, body)
        if supervisor.spec is None:
            raise ApiError(409, "nothing was started yet: POST /api/serve/start first", "conflict_error")
        supervisor.switch(profile)
        return supervisor.snapshot()

    @app.post("/api/serve/restart", dependencies=guard)
    def restart() -> dict[str, Any]:
        if supervisor.spec is None:
            raise ApiError(409, "nothing was started yet: POST /api/serve/start first", "conflict_error")
        supervisor.restart()
        return supervisor.snapshot()

    @app.post("/api/serve/stop", dependencies=guard)
    def stop() -> dict[str, Any]:
        supervisor.stop()
        return supervisor.snapshot()


def _vram_budget(registry: Registry, profile: str | None) -> int | None:
    if profile is None:
        return None
    try:
        budget = registry.profile(profile).flags.get("vram_budget")
    except RegistryError:
        return None
    return parse_bytes(budget, "--vram-budget") if budget else None


def _add_monitor_routes(
    app: FastAPI, registry: Registry, supervisor: Supervisor, sampler: Sampler, auth: Any
) -> None:
    guard = [Depends(auth)]

    @app.get("/api/status", dependencies=guard)
    def status() -> dict[str, Any]:
        snap = supervisor.snapshot()
        return {**snap, "vram_budget_bytes": _vram_budget(registry, snap["profile"])}

    @app.get("/api/logs", dependencies=guard)
    def logs(lines: int = 200) -> dict[str, Any]:
        if not 1 <= lines <= 2000:
            raise ApiError(400, "lines must be between 1 and 2000")
        return {"lines": list(supervisor.recent)[-lines:], "path": str(supervisor.log_path)}

    @app.get("/api/system", dependencies=guard)
    def system() -> dict[str, Any]:
        return sampler.sample().to_dict()


def _add_child_routes(
    app: FastAPI, supervisor: Supervisor, auth: Any, api_key: str, http: httpx.AsyncClient
) -> None:
    # Two routes, one handler: each method gets its own OpenAPI operation id (one api_route with
    # both methods gave the two the same id, which client generators reject).
    @app.get("/api/child/{route:path}", dependencies=[Depends(auth)], operation_id="child_get")
    @app.post("/api/child/{route:path}", dependencies=[Depends(auth)], operation_id="child_post")
    async def child(route: str, request: Request) -> Response:
        if CHILD_ROUTES.get(route) != request.method:
            names = ", ".join(sorted(CHILD_ROUTES))
            raise ApiError(404, f"the manager forwards only {names} to the server", "not_found_error")
        if supervisor.spec is None or supervisor.status.state != "running":
            raise ApiError(409, f"no server is running (state: {supervisor.status.state})", "conflict_error")
        body = await request.body() if request.method == "POST" else None
        query = f"?{request.url.query}" if request.url.query else ""
        return await forward(http, f"{supervisor.spec.url}/{route}{query}", request.method, body, api_key)


def _add_discovery_routes(app: FastAPI, auth: Any, api_key: str, serve_port: int, ports: list[int]) -> None:
    @app.get("/api/servers", dependencies=[Depends(auth)])
    def servers() -> dict[str, Any]:
        found = discover(ports, serve_port, api_key)
        return {"ports": sorted({*ports, serve_port}), "servers": [f.to_json() for f in found]}
