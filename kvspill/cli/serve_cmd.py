"""`kvspill serve [MODEL]`: the OpenAI-compatible server (uvicorn over `kvspill.server`).

Invariants:
- Every flag can also come from a `KVSPILL_<FLAG>` environment variable; the engine flags are
  the same as every engine command's (`cli/engine_options.py`).
- Flags are validated (EngineConfig) before anything listens: a bad value exits 2 with one line.
- The engine loads on its own thread (logging the memory plan first) while `/health` answers 503;
  a load failure stops the server.
- SIGTERM: stop admitting, let in-flight requests finish within `--shutdown-timeout`, then abort
  them (clients get an error event or a 503) and stop the engine thread (`server/lifecycle.py`).
- Binding beyond loopback without `--api-key` logs a warning.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from kvspill.cli.engine_options import EngineOptions, engine_config, with_engine_options
from kvspill.errors import KvspillError

logger = logging.getLogger("kvspill.serve")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _opt(help_: str, env: str, *names: str) -> Any:
    return typer.Option(*names, help=help_, envvar=f"KVSPILL_{env}")


@with_engine_options
def serve_command(
    model: Annotated[
        str | None,
        typer.Argument(
            help="Local dir, .gguf file or cached HF id (default: embedded SmolLM2-135M-Instruct).",
            envvar="KVSPILL_MODEL",
        ),
    ] = None,
    host: Annotated[str, _opt("Address to bind.", "HOST")] = "127.0.0.1",
    port: Annotated[int, _opt("Port to bind.", "PORT")] = 8000,
    api_key: Annotated[str | None, _opt("Require Authorization: Bearer <key>.", "API_KEY")] = None,
    max_waiting_requests: Annotated[
        int, _opt("Requests that may wait for their first token before 503.", "MAX_WAITING_REQUESTS")
    ] = 64,
    max_queued_tokens: Annotated[
        int | None,
        _opt(
            "Prompt tokens that may wait for their first token before 503 (default: 8 x max model len).",
            "MAX_QUEUED_TOKENS",
        ),
    ] = None,
    shutdown_timeout: Annotated[
        float, _opt("Seconds in-flight requests get on SIGTERM before they are aborted.", "SHUTDOWN_TIMEOUT")
    ] = 30.0,
    served_model_name: Annotated[
        str | None, _opt("Model name clients send (default: MODEL).", "SERVED_MODEL_NAME")
    ] = None,
    profile: Annotated[
        str | None, _opt("Saved registry profile: its model and engine flags (flags given win).", "PROFILE")
    ] = None,
    *,
    engine: EngineOptions,
) -> None:
    """Serve MODEL over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, ...)."""
    try:
        if max_waiting_requests < 1:
            raise KvspillError("--max-waiting-requests must be at least 1")
        if max_queued_tokens is not None and max_queued_tokens < 1:
            raise KvspillError("--max-queued-tokens must be at least 1 (leave it out for 8 x max model len)")
        if shutdown_timeout < 0:
            raise KvspillError("--shutdown-timeout must be 0 or more seconds")
        if profile is not None:  # the registry's model and flags; those given on the command line win
            model, engine, served_model_name = _profile(profile, model, engine, served_model_name)
        config = engine_config(engine, model)
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if host not in _LOOPBACK and not api_key:
        logger.warning(
            "binding to %s without --api-key: anyone who can reach this port can use the model", host
        )
    run_server(
        config,
        host,
        port,
        api_key,
        max_waiting_requests,
        shutdown_timeout,
        served_model_name or _default_name(model),
        max_queued_tokens,
    )


def _profile(name: str, model: str | None, engine: EngineOptions, served: str | None) -> Any:
    from kvspill.registry.profiles import resolve_serve_profile

    source, options, profile_model = resolve_serve_profile(name, model, engine)
    return source, options, served or profile_model


def _default_name(model: str | None) -> str:
    if model is None:
        return "SmolLM2-135M-Instruct"
    return model


def run_server(
    config: Any,
    host: str,
    port: int,
    api_key: str | None,
    max_waiting_requests: int,
    shutdown_timeout: float,
    model_name: str,
    max_queued_tokens: int | None = None,
) -> None:
    from kvspill.server import ServerSettings, create_app
    from kvspill.server.lifecycle import serve

    def factory() -> Any:
        from kvspill.engine import LLMEngine

        try:
            return LLMEngine(config)
        except Exception:
            logger.error("the engine failed to load; stopping the server")
            os.kill(os.getpid(), signal.SIGTERM)
            raise

    aliases = {Path(model_name).name} if model_name else set()
    settings = ServerSettings(model_name, api_key, max_waiting_requests, aliases, max_queued_tokens)
    serve(create_app(factory, settings), host, port, shutdown_timeout)


def register(app: typer.Typer) -> None:
    """Add the `serve` command to `app`."""
    app.command("serve")(serve_command)
