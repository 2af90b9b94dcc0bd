"""The FastAPI app factory: OpenAI-compatible endpoints over one `AsyncEngine`.

Invariants:
- The engine is built on the engine thread at startup (lifespan); until it is ready `/health`
  and every request answer 503 `unavailable`.
- Validation failures (malformed JSON, wrong types) are 400 `invalid_request_error`, never 422.
- With `api_key`, every route but `/health` and `/metrics` needs `Authorization: Bearer <key>`.
- An unknown `model` name is a 404 `model_not_found`.
- Without the RAG routes (`--rag`, mounted by `rag_routes.mount_rag`, which replaces it)
  `POST /v1/embeddings` is a 404 saying how to turn them on, not a bare "no route".
- Shutdown: stop admitting, then abort what is still in flight and stop the engine thread
  (`lifecycle.serve` has already given open requests `--shutdown-timeout` and aborted the rest).
- A request asks for at most `max_waiting_requests` completions (prompts x n); more is a 400.
- A guided request's grammar is compiled before admission by the `GrammarGate` (limits, cache,
  per-client budget, worker deadline), never on the engine thread (`grammar_gate.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from kvspill.dashboard.page import UI_OPEN_PATHS, dashboard_router
from kvspill.engine.client import EngineClient, TokenizerClient
from kvspill.errors import InvalidParameterError, KvspillError
from kvspill.server.async_engine import AsyncEngine, EngineUnavailableError, ServerBusyError
from kvspill.server.auth import ApiKeyMiddleware
from kvspill.server.compile_budget import CompileBudgetError
from kvspill.server.cors import add_cors
from kvspill.server.echo import make_echo
from kvspill.server.errors import document_400s, error_response, exception_response, invalid
from kvspill.server.grammar_gate import ClientGoneError, GateSettings, GrammarGate, budget_response
from kvspill.server.hosts import HostCheckMiddleware
from kvspill.server.kv_routes import kv_router
from kvspill.server.limits import BodyLimitMiddleware, add_http_error_handlers, default_max_request_bytes
from kvspill.server.log_ring import log_router
from kvspill.server.metrics import ServerMetrics
from kvspill.server.precache_routes import precache_router
from kvspill.server.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from kvspill.server.reasoning import parser_on, prompt_opens_block
from kvspill.server.root_path import RootPathMiddleware
from kvspill.server.serving import Job, run_job
from kvspill.server.tools import ToolPlan, plan_tools
from kvspill.server.workers import TextWorkers

_OPEN_PATHS = {"/health", "/metrics", *UI_OPEN_PATHS}  # the /ui page holds no data


@dataclass
class ServerSettings:
    model_name: str
    api_key: str | None = None
    max_waiting_requests: int = 64
    aliases: set[str] = field(default_factory=set)  # other names accepted for `model`
    max_queued_tokens: int | None = None  # None: async_engine.default_queued_tokens
    max_request_bytes: int | None = None  # None: sized from max_model_len (limits.py)
    allowed_hosts: set[str] | None = None  # Host names answered (None: any; hosts.py)
    guided: GateSettings = field(default_factory=GateSettings)  # grammar compiles (grammar_gate.py)
    reasoning_parser: str = "auto"  # reasoning_content apart from content (reasoning.py)
    tool_call_parser: str = "auto"  # the tool-call format; auto: the chat template's (tool_parsers.py)
    allowed_origins: tuple[str, ...] | None = None  # browser pages that may call (None: loopback; cors.py)
    more_names: tuple[str, ...] = ()  # --served-model-name's others: accepted and listed in /v1/models
    root_path: str = ""  # --root-path: the URL prefix a reverse proxy serves this under (root_path.py)


@dataclass
class _Context:
    """What every route needs: the engine front, the settings, the metrics."""

    ae: AsyncEngine
    settings: ServerSettings
    metrics: ServerMetrics
    created: int
    workers: TextWorkers  # tokenization and templating, off the event loop and the engine thread
    gate: GrammarGate  # guided requests' grammars, compiled before admission

    def check_model(self, model: str | None) -> JSONResponse | None:
        if model is None or model in {
            self.settings.model_name,
            *self.settings.aliases,
            *self.settings.more_names,
        }:
            return None
        return error_response(
            404,
            f"The model `{model}` does not exist. This server serves `{self.settings.model_name}`.",
            "invalid_request_error",
            "model_not_found",
            "model",
        )

    def check_num_choices(self, num_prompts: int, n: int) -> None:
        """One request may not ask for more completions than may wait at once."""
        limit = self.settings.max_waiting_requests
        if num_prompts * n > limit:
            raise InvalidParameterError(
                "n" if n > 1 else "prompt",
                f"this request asks for {num_prompts * n} completions "
                f"({num_prompts} prompts x n={n}); this server takes at most {limit} in one request "
                "(--max-waiting-requests): send fewer prompts or a smaller n",
            )

    def engine_or_503(self) -> EngineClient:
        if not self.ae.ready or self.ae.engine is None:
            raise EngineUnavailableError(self.ae.load_error or "the engine is still loading")
        return self.ae.engine


def create_app(factory: Callable[[], EngineClient], settings: ServerSettings) -> FastAPI:
    """`factory()` builds the engine, an `LLMEngine` or any `EngineClient` (on the engine thread)."""
    metrics = ServerMetrics(settings.model_name)
    ae = AsyncEngine(
        factory,
        settings.max_waiting_requests,
        on_output=metrics.observe_output,
        max_queued_tokens=settings.max_queued_tokens,
        on_end=metrics.forget,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ae.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            ae.stop_admitting()
            await asyncio.to_thread(ae.shutdown)
            ctx.workers.shutdown()
            ctx.gate.close()

    app = FastAPI(title="kvspill", lifespan=lifespan)
    app.state.engine = ae
    app.state.metrics = metrics
    ctx = _Context(ae, settings, metrics, int(time.time()), TextWorkers(), GrammarGate(settings.guided))
    _add_error_handlers(app)
    add_http_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=lambda: _max_request_bytes(ctx))
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key, open_paths=_OPEN_PATHS)
    add_cors(app, settings.allowed_origins)  # outside the key check: a preflight carries no key
    if settings.allowed_hosts is not None:  # outermost: a refused Host learns nothing else
        app.add_middleware(HostCheckMiddleware, allowed=settings.allowed_hosts)
    if settings.root_path:  # before anything reads a path
        app.add_middleware(RootPathMiddleware, root_path=settings.root_path)
    _add_generation_routes(app, ctx)
    _add_token_routes(app, ctx)
    _add_info_routes(app, ctx)
    app.include_router(precache_router(ae))  # POST /v1/precache
    app.include_router(kv_router(ae, metrics, ctx.workers))  # /v1/kv/*: cache management by prefix
    app.include_router(dashboard_router("serve", settings.root_path))  # read-only dashboard at /ui
    app.include_router(log_router())  # GET /logs: the recent log lines the /ui page shows
    document_400s(app)
    return app


def _max_request_bytes(ctx: _Context) -> int:
    if ctx.settings.max_request_bytes is not None:
        return ctx.settings.max_request_bytes
    engine = ctx.ae.engine
    return default_max_request_bytes(engine.max_model_len if engine is not None else None)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return invalid(f"malformed JSON body: {first.get('ctx', {}).get('error', 'parse error')}")
        param = _field_path(first.get("loc", ())) or None
        msg = "; ".join(f"{_field_path(e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors[:5])
        return invalid(f"invalid request: {msg}", param)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        return exception_response(exc)


# pydantic names a union's member in an error's location (`stop.str`, `stop.list[str].0`):
# the request's field path stops before it
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "tuple", "none"})


def _field_path(loc: Sequence[int | str]) -> str:
    parts: list[str] = []
    for p in loc:
        if p == "body" and not parts:
            continue
        if isinstance(p, str) and (p in _TYPE_TAGS or "[" in p or "-" in p):
            break
        parts.append(str(p))
    return ".".join(parts)


def _add_generation_routes(app: FastAPI, ctx: _Context) -> None:
    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        if (bad := ctx.check_model(body.model)) is not None:
            return bad
        return await _serve_job(ctx, request, lambda: _completion_job(ctx, body, request), "prompt")

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        if (bad := ctx.check_model(body.model)) is not None:
            return bad
        return await _serve_job(ctx, request, lambda: _chat_job(ctx, body, request), "messages")


async def _serve_job(
    ctx: _Context, request: Request, build: Callable[[], Awaitable[Job | Response]], prompt_param: str
) -> Response:
    """Build a request's job (a refusal is its error response), then run it on the engine."""
    try:
        job = await build()
    except ClientGoneError:
        return Response(status_code=499)
    except CompileBudgetError as e:
        return budget_response(e)
    except (KvspillError, EngineUnavailableError, ServerBusyError) as e:
        return exception_response(e, prompt_param)
    if isinstance(job, Response):
        return job
    return await run_job(ctx.ae, job, request, ctx.metrics.rejected)


def _sampling_defaults(engine: EngineClient) -> Mapping[str, float | int]:
    """The model's recommended sampling values for what a request leaves out (none without a
    tokenizer: random-weight shapes)."""
    return engine.tokenizer.sampling_defaults if engine.tokenizer is not None else {}


async def _completion_job(ctx: _Context, body: CompletionRequest, request: Request) -> Job:
    engine = ctx.engine_or_503()
    model_name = ctx.settings.model_name
    sent = body.prompts()
    ctx.check_num_choices(len(sent), body.num_samples)
    prompts = await ctx.workers.run(_prompt_ids, engine, sent, body.suffix, model_name)
    echo = await ctx.workers.run(
        make_echo, body.echo, body.max_tokens, sent, engine.tokenizer, engine.vocab_size
    )
    params = await ctx.gate.prepare(engine, body.sampling_params(_sampling_defaults(engine)), request)
    if engine.tokenizer is None:
        # A model without a tokenizer (random-weight benchmark shapes) takes token ids and
        # answers token ids, as vLLM does with --skip-tokenizer-init: text stays empty.
        params = replace(params, detokenize=False)
    return Job(
        False, model_name, prompts, params, body.stream, body.include_usage, engine.tokenizer,
        n=body.num_samples, echo=echo, continuous_usage=body.continuous_usage,
        prompt_logprobs=body.prompt_logprobs,
    )  # fmt: skip


async def _chat_job(ctx: _Context, body: ChatCompletionRequest, request: Request) -> Job | Response:
    engine = ctx.engine_or_503()
    params = body.sampling_params(_sampling_defaults(engine))
    ctx.check_num_choices(1, body.num_samples)
    if engine.tokenizer is None:
        return invalid("this model has no tokenizer, so it cannot take chat messages", "messages")
    tools = plan_tools(
        body.tools, body.tool_choice, body.parallel_tool_calls, engine.tokenizer.chat_template,
        ctx.settings.tool_call_parser,
    )  # fmt: skip
    if tools is not None and tools.guided is not None:
        if params.guided is not None:
            why = (
                "tool_choice required or named"
                if tools.mode != "auto"
                else "tools on this model (its template has no tool support, so a grammar writes its answers)"
            )
            raise InvalidParameterError(
                params.guided.param, f"{params.guided.param} cannot be combined with {why}"
            )
        params = replace(params, guided=tools.guided)
    params = await ctx.gate.prepare(engine, params, request)
    template_kwargs = body.template_kwargs(body.messages)
    ids = await ctx.workers.run(_chat_ids, engine.tokenizer, body.messages, template_kwargs, tools)
    reasoning_opened = None
    if parser_on(ctx.settings.reasoning_parser, engine.tokenizer.chat_template, params):
        reasoning_opened = await ctx.workers.run(prompt_opens_block, engine.tokenizer, ids)
    return Job(
        True, ctx.settings.model_name, [ids], params, body.stream, body.include_usage, engine.tokenizer,
        n=body.num_samples, tools=tools, reasoning_opened=reasoning_opened,
        continuous_usage=body.continuous_usage, prompt_logprobs=body.prompt_logprobs,
        chat_echo=body.echoed_text(),
    )  # fmt: skip


def _add_token_routes(app: FastAPI, ctx: _Context) -> None:
    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> Response:
        try:
            engine = ctx.engine_or_503()
            tok = engine.tokenizer
            if tok is None:
                return invalid("this model has no tokenizer", "prompt")
            if body.messages is None and body.prompt is None:
                return invalid("give `prompt` or `messages`", "prompt")
            ids = await ctx.workers.run(_tokenize, tok, body)
        except (KvspillError, EngineUnavailableError, ServerBusyError) as e:
            return exception_response(e)
        return JSONResponse({"tokens": ids, "count": len(ids), "max_model_len": engine.max_model_len})

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> Response:
        try:
            engine = ctx.engine_or_503()
            if engine.tokenizer is None:
                return invalid("this model has no tokenizer", "tokens")
            bad = next((t for t in body.tokens if not 0 <= t < engine.vocab_size), None)
            if bad is not None:
                return invalid(f"token id {bad} is outside the vocabulary [0, {engine.vocab_size})", "tokens")
            text = await ctx.workers.run(_detokenize, engine.tokenizer, body.tokens)
        except (EngineUnavailableError, ServerBusyError) as e:
            return exception_response(e)
        return JSONResponse({"prompt": text})


def _unavailable(ae: AsyncEngine) -> JSONResponse:
    """Still loading, or the engine failed to load: a 503 saying which."""
    return error_response(
        503, ae.load_error or "the engine is still loading", "unavailable", "unavailable",
        headers={"Retry-After": "1"},
    )  # fmt: skip


def _add_model_routes(app: FastAPI, ctx: _Context) -> None:
    ae = ctx.ae

    listed = (ctx.settings.model_name, *ctx.settings.more_names)

    def model_card(max_model_len: int, name: str = ctx.settings.model_name) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": ctx.created,
            "owned_by": "kvspill",
            "max_model_len": max_model_len,
        }

    # A 503 while loading, as every route that needs the engine: clients that poll /v1/models
    # for readiness (not /health) wait for a model that can answer.
    @app.get("/v1/models")
    async def models() -> Response:
        if not ae.ready or ae.engine is None:
            return _unavailable(ae)
        cards = [model_card(ae.engine.max_model_len, name) for name in listed]
        return JSONResponse({"object": "list", "data": cards})

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> Response:
        if (bad := ctx.check_model(model_id)) is not None:
            return bad
        if not ae.ready or ae.engine is None:
            return _unavailable(ae)
        name = model_id if model_id in listed else ctx.settings.model_name
        return JSONResponse(model_card(ae.engine.max_model_len, name))


def _add_info_routes(app: FastAPI, ctx: _Context) -> None:
    ae = ctx.ae
    _add_model_routes(app, ctx)

    @app.get("/health")
    @app.head("/health", include_in_schema=False)  # load balancers probe with HEAD
    async def health() -> Response:
        return Response(status_code=200) if ae.ready else _unavailable(ae)

    @app.get("/v1/kv")
    async def kv() -> Response:
        try:
            return JSONResponse((await ae.kv_stats()).to_json())  # fresh, or a snapshot during a long step
        except EngineUnavailableError as e:
            return exception_response(e)

    @app.get("/version")  # llama-server's route: scripts that check what they talk to
    async def version() -> dict:
        return {"version": _installed_version(), "model": ctx.settings.model_name}

    @app.post("/v1/embeddings", include_in_schema=False)  # replaced by the real route under --rag
    async def embeddings_without_rag() -> Response:
        return error_response(
            404,
            "this server has no embedding model: start it with --rag (kvspill serve --rag --rag-root DIR, "
            "docs/rag.md) to serve /v1/embeddings",
            "invalid_request_error",
            "not_found",
        )

    @app.get("/metrics")
    async def prom() -> Response:
        return Response(await ctx.metrics.scrape(ae), media_type="text/plain; version=0.0.4; charset=utf-8")


def _installed_version() -> str:
    """The installed kvspill's version (`kvspill.__version__` would import, to the import
    contracts, the package's lazy `LLM` and the engine with it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvspill")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _chat_ids(
    tok: TokenizerClient,
    messages: list[ChatMessage],
    template_kwargs: dict[str, Any],
    tools: ToolPlan | None = None,
) -> list[int]:
    """Token ids of `messages` (and `tools`) through the model's chat template; a template that
    rejects them (jinja's raise_exception, e.g. roles that do not alternate) is the client's error."""
    from jinja2 import TemplateError

    dicts = [m.as_template_dict() for m in messages]
    kwargs = dict(template_kwargs)
    if tools is not None:
        kwargs["tools"] = tools.template_tools
    try:
        return list(tok.apply_chat_template(dicts, **kwargs))
    except (TemplateError, ValueError) as e:
        raise InvalidParameterError(
            "messages", f"the model's chat template rejected these messages: {e}"
        ) from e


def _tokenize(tok: TokenizerClient, body: TokenizeRequest) -> list[int]:
    if body.messages is not None:
        return _chat_ids(tok, body.messages, body.template_kwargs(body.messages))
    assert body.prompt is not None
    return tok.encode(body.prompt, add_special_tokens=body.add_special_tokens)


def _detokenize(tok: TokenizerClient, tokens: list[int]) -> str:
    return tok.decode(tokens, skip_special_tokens=False)


def _prompt_ids(
    engine: EngineClient, prompts: list[str | list[int]], suffix: str | None, model_name: str
) -> list[str | list[int]]:
    """Token ids of every prompt (fill-in-the-middle with `suffix`), on a text worker."""
    if suffix:
        return [_fim_prompt(engine, p, suffix, model_name) for p in prompts]
    return [engine.encode(p) if isinstance(p, str) else p for p in prompts]


def _fim_prompt(engine: EngineClient, prompt: str | list[int], suffix: str, model_name: str) -> list[int]:
    """Prefix-suffix-middle token ids for a fill-in-the-middle request."""
    tok = engine.tokenizer
    fim = tok.fim_tokens if tok is not None else None
    if tok is None or fim is None:
        raise InvalidParameterError(
            "suffix",
            f"The model `{model_name}` has no fill-in-the-middle tokens, so `suffix` is not supported.",
        )
    if not isinstance(prompt, str):
        raise InvalidParameterError("prompt", "`suffix` needs a text prompt")
    return [
        fim.prefix_id,
        *tok.encode(prompt, add_special_tokens=False),
        fim.suffix_id,
        *tok.encode(suffix, add_special_tokens=False),
        fim.middle_id,
    ]
