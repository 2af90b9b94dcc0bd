"""`kvspill serve-ray`: N replicas of the OpenAI server on Ray Serve, behind a prefix-hash router.

    kvspill serve-ray -m /models/Llama-3.1-8B-Instruct --replicas 2 --tensor-parallel-size 2

Each replica is one Ray Serve deployment with one replica (a Ray actor holding K GPUs for
`--tensor-parallel-size K`) running the same FastAPI app as `kvspill serve` (server/app.py) with
its own engine. The router, the HTTP ingress, picks a replica by the hash of the prompt's start
(server/prefix_routing.py), so a repeated repository context keeps reaching the replica whose
prefix cache holds it, and passes the replica's response through as it streams. One deployment
per replica (not one deployment of N replicas) is what lets the router name the replica.

Ray is optional (`pip install 'kvspill[ray]'`); the command says so when it is missing. A
multi-host cluster: `ray start --head` on one host, `ray start --address HEAD:6379` on the others,
then this command on the head (docs/distributed.md).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from kvspill.cli.engine_options import with_engine_options
from kvspill.cli.user_errors import refuse_empty_key
from kvspill.config import EngineConfig
from kvspill.errors import KvspillError
from kvspill.options import EngineOptions, engine_config
from kvspill.server.prefix_routing import DEFAULT_PREFIX_CHARS

logger = logging.getLogger(__name__)
REPLICA_HEADER = "x-kvspill-replica"  # which replica answered: the router's choice, made visible


def _ray_serve() -> Any:
    try:
        from ray import serve
    except ImportError as e:
        raise KvspillError("serve-ray needs Ray Serve: pip install 'kvspill[ray]' (or 'ray[serve]')") from e
    return serve


def _replica_class(serve: Any, config: EngineConfig, model_name: str, max_waiting_requests: int) -> Any:
    gpus = config.tensor_parallel_size if config.device != "cpu" else 0

    @serve.deployment(num_replicas=1, ray_actor_options={"num_gpus": gpus, "num_cpus": 0})
    class KvspillReplica:
        """One engine and its OpenAI app; `forward` runs one HTTP request through it."""

        async def __init__(self, index: int) -> None:  # type: ignore[misc]  # Ray Serve awaits it: healthy once loaded
            import asyncio

            from kvspill.engine.core import LLMEngine
            from kvspill.server import ServerSettings, create_app

            self.index = index
            settings = ServerSettings(model_name, max_waiting_requests=max_waiting_requests)
            self.app = create_app(lambda: LLMEngine(config), settings)
            self.lifespan = self.app.router.lifespan_context(self.app)
            await self.lifespan.__aenter__()  # starts the engine thread, which loads the model
            engine = self.app.state.engine
            while not engine.ready:
                if engine.load_error:
                    raise RuntimeError(f"replica {index}: the engine failed to load: {engine.load_error}")
                await asyncio.sleep(0.1)

        async def forward(
            self, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes
        ) -> Any:
            from kvspill.server.prefix_routing import call_asgi

            async for message in call_asgi(self.app, method, path, query, headers, body):
                if message["type"] == "http.response.start":
                    tag = (REPLICA_HEADER.encode(), str(self.index).encode())
                    message = {**message, "headers": [*message.get("headers", []), tag]}
                yield message

    return KvspillReplica


def _router_class(serve: Any, prefix_chars: int, api_key: str | None) -> Any:
    from starlette.requests import Request
    from starlette.responses import StreamingResponse

    @serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
    class PrefixRouter:
        """The HTTP ingress: replica by prompt-prefix hash, response streamed through."""

        def __init__(self, *replicas: Any) -> None:
            self.replicas = replicas

        async def __call__(self, request: Request) -> Any:
            from kvspill.server.prefix_routing import pick_replica

            if api_key and request.url.path != "/health":
                import hmac

                from kvspill.server.errors import error_response

                given = request.headers.get("authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                    return error_response(
                        401,
                        "missing or wrong API key: send Authorization: Bearer <key>",
                        "authentication_error",
                        "invalid_api_key",
                    )
            body = await request.body()
            index = pick_replica(body, len(self.replicas), prefix_chars)
            stream = (
                self.replicas[index]
                .options(stream=True)
                .forward.remote(
                    request.method, request.url.path, request.url.query.encode(), request.headers.raw, body
                )
            )
            start = await stream.__anext__()

            async def chunks() -> Any:
                async for message in stream:
                    if message.get("body"):
                        yield message["body"]

            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
            response = StreamingResponse(chunks(), status_code=start["status"])
            response.raw_headers = [
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in headers
                if k.lower() not in ("content-length", "transfer-encoding")
            ]
            return response

    return PrefixRouter


def build_ray_app(
    config: EngineConfig,
    model_name: str,
    replicas: int,
    prefix_chars: int = DEFAULT_PREFIX_CHARS,
    api_key: str | None = None,
    max_waiting_requests: int = 64,
) -> Any:
    """The Ray Serve application: `replicas` engine deployments behind one router."""
    if replicas < 1:
        raise KvspillError(f"--replicas must be at least 1, got {replicas}")
    if prefix_chars < 1:
        raise KvspillError(f"--prefix-chars must be at least 1, got {prefix_chars}")
    serve = _ray_serve()
    replica = _replica_class(serve, config, model_name, max_waiting_requests)
    handles = [replica.options(name=f"kvspill-replica-{i}").bind(i) for i in range(replicas)]
    return _router_class(serve, prefix_chars, api_key).bind(*handles)


@with_engine_options
def serve_ray_command(
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="Local dir, .gguf file or cached HF id (default: embedded SmolLM2)."
        ),
    ] = None,
    replicas: Annotated[int, typer.Option(help="Engines (each with --tensor-parallel-size GPUs).")] = 2,
    host: Annotated[str, typer.Option(help="Address the router binds.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port the router binds.")] = 8000,
    api_key: Annotated[str | None, typer.Option(help="Require Authorization: Bearer <key>.")] = None,
    prefix_chars: Annotated[
        int, typer.Option(help="Characters of the prompt's start that pick the replica.")
    ] = DEFAULT_PREFIX_CHARS,
    ray_address: Annotated[
        str | None, typer.Option(help="A running Ray cluster (default: start a local one).")
    ] = None,
    *,
    engine: EngineOptions,
) -> None:
    """Serve MODEL from several replicas on Ray Serve, routed by prompt prefix (docs/distributed.md)."""
    refuse_empty_key(api_key)
    try:
        config = engine_config(engine, model)
        app = build_ray_app(config, model or "SmolLM2-135M-Instruct", replicas, prefix_chars, api_key)
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    import ray
    from ray import serve

    ray.init(address=ray_address)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name="kvspill", route_prefix="/", blocking=True)


def register(app: typer.Typer) -> None:
    """Add the `serve-ray` command to `app`."""
    app.command("serve-ray")(serve_ray_command)
