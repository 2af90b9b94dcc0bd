"""`kvspill serve [MODEL]`: the OpenAI-compatible server (uvicorn over `kvspill.server`).

Invariants:
- Every flag can also come from a `KVSPILL_<FLAG>` environment variable; the engine flags are
  the same as every engine command's (`kvspill/options.py`). Any flag can also come from a TOML
  `--config` file (`KVSPILL_CONFIG`); precedence flag > env > file > default (`cli/config_file.py`).
- Flags are validated (EngineConfig) before anything listens: a bad value exits 2 with one line.
  Then the port, the model and the disk tier are checked (`serve_checks.py`): a failure exits 1
  with one line, before the port is bound.
- The engine loads on its own thread (logging the memory plan first) while `/health` answers 503;
  a load failure stops the server with one line and exit code 1. SIGTERM after draining: 0.
- With no API key on a loopback bind only loopback Host headers are answered (`--allowed-hosts`
  adds names); slow request heads, idle keep-alives and connections past `--limit-concurrency`
  are cut (`server/slow_clients.py`, uvicorn).
- SIGTERM: stop admitting, let in-flight requests finish within `--shutdown-timeout`, then abort
  them (clients get an error event or a 503) and stop the engine thread (`server/lifecycle.py`).
- Binding beyond loopback without `--api-key` logs a warning.
- Other servers' flags (vLLM's `--swap-space`, SGLang's `--context-length`, llama-server's `-c`
  and `--version`, ...) are read as kvspill's with a `note:` line each, or refused with one line
  (`cli/dialects.py`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from kvspill.cli.config_file import config_option, format_effective_config, print_config_option
from kvspill.cli.dialects import DialectCommand
from kvspill.cli.engine_options import (
    DownloadDirOpt,
    OfflineOpt,
    RevisionOpt,
    local_model,
    with_engine_options,
)
from kvspill.cli.rag_cmd import RagOptions, build_rag_service, with_rag_options
from kvspill.cli.serve_checks import check_before_binding, check_port_number
from kvspill.cli.user_errors import refuse_empty_key
from kvspill.errors import InvalidParameterError, KvspillError
from kvspill.guided.compile_pool import DEFAULT_TIMEOUT_S as DEFAULT_COMPILE_TIMEOUT_S
from kvspill.options import EngineOptions, engine_config
from kvspill.plan.units import GiB
from kvspill.server.compile_budget import DEFAULT_BUDGET_S as DEFAULT_COMPILE_BUDGET_S
from kvspill.server.connection_limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    ConnectionLimits,
    check_tls_files,
)
from kvspill.server.http_log import LEVELS as HTTP_LOG_LEVELS
from kvspill.server.http_log import HttpLog

logger = logging.getLogger("kvspill.serve")


def _opt(help_: str, env: str, *names: str) -> Any:
    return typer.Option(*names, help=help_, envvar=f"KVSPILL_{env}")


# The flags of `serve` beside the engine's and the RAG service's, in their help order.
ModelArg = Annotated[
    str | None,
    typer.Argument(
        help="Local dir, .gguf file or cached HF id (default: embedded SmolLM2-135M-Instruct).",
        envvar="KVSPILL_MODEL",
    ),
]
ModelFlag = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="The model, as the other commands take it (or give MODEL).",
        envvar="KVSPILL_MODEL",
    ),
]
HostOpt = Annotated[str, _opt("Address to bind.", "HOST")]
PortOpt = Annotated[int, _opt("Port to bind.", "PORT")]
ApiKeyOpt = Annotated[str | None, _opt("Require Authorization: Bearer <key>.", "API_KEY")]
MaxWaitingOpt = Annotated[
    int, _opt("Requests that may wait for their first token before 503.", "MAX_WAITING_REQUESTS")
]
MaxQueuedTokensOpt = Annotated[
    int | None,
    _opt(
        "Prompt tokens that may wait for their first token before 503 (default: what the KV tiers hold, at least 8 x max model len).",
        "MAX_QUEUED_TOKENS",
    ),
]
ShutdownTimeoutOpt = Annotated[
    float, _opt("Seconds in-flight requests get on SIGTERM before they are aborted.", "SHUTDOWN_TIMEOUT")
]
ServedNameOpt = Annotated[
    str | None,
    _opt(
        "Model name clients send (default: MODEL); comma-separated names are all answered, the first "
        "one reported (vLLM's several names).",
        "SERVED_MODEL_NAME",
    ),
]
AllowedHostsOpt = Annotated[
    str | None,
    _opt(
        "Comma-separated Host names answered besides loopback ones ('*': any). Without --api-key "
        "on a loopback bind only loopback names are answered (DNS rebinding).",
        "ALLOWED_HOSTS",
    ),
]
AllowedOriginsOpt = Annotated[
    str | None,
    _opt(
        "Web pages (origins) whose scripts may call the server from a browser, comma-separated or "
        "vLLM's JSON list ('*': any); default: pages served from this machine's localhost.",
        "ALLOWED_ORIGINS",
    ),
]
RootPathOpt = Annotated[
    str,
    _opt(
        "URL prefix a reverse proxy serves this server under, e.g. /llm (vLLM's flag): routes answer "
        "with and without it, and the /ui page and /docs name it.",
        "ROOT_PATH",
    ),
]
SslKeyOpt = Annotated[
    str | None, _opt("Private key file (PEM) for HTTPS, with --ssl-certfile.", "SSL_KEYFILE")
]
SslCertOpt = Annotated[
    str | None, _opt("Certificate file (PEM) for HTTPS, with --ssl-keyfile.", "SSL_CERTFILE")
]
MaxRequestBytesOpt = Annotated[
    int | None,
    _opt(
        "Largest request body; more is a 413 (default: 64 bytes x max model len, >= 1 MiB).",
        "MAX_REQUEST_BYTES",
    ),
]
LimitConcurrencyOpt = Annotated[
    int, _opt("Open connections and requests at most; more get 503.", "LIMIT_CONCURRENCY")
]
KeepAliveOpt = Annotated[int, _opt("Seconds an idle keep-alive connection is kept.", "TIMEOUT_KEEP_ALIVE")]
HeaderTimeoutOpt = Annotated[
    float, _opt("Seconds a connection has to send a request's headers.", "HEADER_TIMEOUT")
]
BodyTimeoutOpt = Annotated[
    float,
    _opt(
        "Seconds a request's body may take to arrive after its headers; past it the connection closes.",
        "BODY_TIMEOUT",
    ),
]
PerClientOpt = Annotated[
    int,
    _opt(
        "Connections one client address may hold at once; past it a 503 (so one client cannot take "
        "every --limit-concurrency slot).",
        "MAX_CONNECTIONS_PER_CLIENT",
    ),
]
CompileTimeoutOpt = Annotated[
    float,
    _opt(
        "Seconds a guided request's grammar may take to compile (in a worker process); past it a 400.",
        "GUIDED_COMPILE_TIMEOUT",
    ),
]
CompileBudgetOpt = Annotated[
    float,
    _opt(
        "Seconds of new-grammar compiling per client IP per minute; past it a 429 (0: no bound).",
        "GUIDED_COMPILE_BUDGET",
    ),
]
ReasoningParserOpt = Annotated[
    str,
    _opt(
        "A thinking model's <think> block as `reasoning_content` apart from `content` on chat: auto "
        "(when the chat template mentions <think>: Qwen3, QwQ, DeepSeek-R1 distills), none (left "
        "in content), or vLLM's deepseek_r1 / qwen3 (always).",
        "REASONING_PARSER",
    ),
]
NoAccessLogOpt = Annotated[
    bool,
    _opt(
        "Log no request lines (vLLM's flag); errors and warnings are still logged.",
        "DISABLE_UVICORN_ACCESS_LOG",
    ),
]
QuietEndpointsOpt = Annotated[
    str | None,
    _opt(
        "Comma-separated paths whose requests are not logged, e.g. /health,/metrics,/v1/models "
        "(health checks, scrapes and the manager's probes; vLLM's flag).",
        "DISABLE_ACCESS_LOG_FOR_ENDPOINTS",
    ),
]
ToolCallParserOpt = Annotated[
    str,
    _opt(
        "How tool calls are read from a chat answer: auto (the format the chat template teaches), or "
        "hermes (<tool_call> tags), mistral ([TOOL_CALLS]) or llama3_json (vLLM's parser names).",
        "TOOL_CALL_PARSER",
    ),
]
UvicornLevelOpt = Annotated[
    str,
    _opt(
        "Level of the HTTP server's own log lines: " + ", ".join(HTTP_LOG_LEVELS) + ".", "UVICORN_LOG_LEVEL"
    ),
]
ProfileOpt = Annotated[
    str | None, _opt("Saved registry profile: its model and engine flags (flags given win).", "PROFILE")
]


@with_engine_options
@with_rag_options
def serve_command(
    ctx: typer.Context,
    model: ModelArg = None,
    model_option: ModelFlag = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    api_key: ApiKeyOpt = None,
    max_waiting_requests: MaxWaitingOpt = 64,
    max_queued_tokens: MaxQueuedTokensOpt = None,
    shutdown_timeout: ShutdownTimeoutOpt = 30.0,
    served_model_name: ServedNameOpt = None,
    config_file: Annotated[Path | None, config_option()] = None,
    print_config: Annotated[bool, print_config_option()] = False,
    allowed_hosts: AllowedHostsOpt = None,
    allowed_origins: AllowedOriginsOpt = None,
    root_path: RootPathOpt = "",
    ssl_keyfile: SslKeyOpt = None,
    ssl_certfile: SslCertOpt = None,
    max_request_bytes: MaxRequestBytesOpt = None,
    limit_concurrency: LimitConcurrencyOpt = 1024,
    timeout_keep_alive: KeepAliveOpt = 5,
    header_timeout: HeaderTimeoutOpt = 10.0,
    body_timeout: BodyTimeoutOpt = DEFAULT_BODY_TIMEOUT_S,
    max_connections_per_client: PerClientOpt = DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    guided_compile_timeout: CompileTimeoutOpt = DEFAULT_COMPILE_TIMEOUT_S,
    guided_compile_budget: CompileBudgetOpt = DEFAULT_COMPILE_BUDGET_S,
    reasoning_parser: ReasoningParserOpt = "auto",
    tool_call_parser: ToolCallParserOpt = "auto",
    disable_uvicorn_access_log: NoAccessLogOpt = False,
    disable_access_log_for_endpoints: QuietEndpointsOpt = None,
    uvicorn_log_level: UvicornLevelOpt = "info",
    profile: ProfileOpt = None,
    offline: OfflineOpt = False,
    revision: RevisionOpt = None,
    download_dir: DownloadDirOpt = None,
    *,
    engine: EngineOptions,
    rag: RagOptions,
) -> None:
    """Serve MODEL over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, ...)."""
    if print_config:
        typer.echo(format_effective_config(ctx))
    try:  # every flag checked before anything loads or listens: a bad one is exit 2
        check_port_number(port)
        _check_admission_flags(max_waiting_requests, max_queued_tokens, shutdown_timeout)
        connection = _checked_connection(ConnectionLimits(
            None, max_request_bytes, limit_concurrency, timeout_keep_alive, header_timeout, body_timeout,
            max_connections_per_client, _origins(allowed_origins), _tls(ssl_keyfile, ssl_certfile),
        ))  # fmt: skip
        _check_guided_flags(guided_compile_timeout, guided_compile_budget)
        refuse_empty_key(api_key)
        root_path = _root_path(root_path)
        http_log = _http_log(disable_uvicorn_access_log, disable_access_log_for_endpoints, uvicorn_log_level)
        _check_parsers(reasoning_parser, tool_call_parser)
        model, engine, served_model_name = _served_model(
            (model, model_option),
            profile,
            engine,
            served_model_name,
            (offline, revision, download_dir),
            fetch=not print_config,
        )
        served_model_name, *other_names = _served_names(served_model_name)
        config = engine_config(engine, model)
        _check_context_flag(config)
        rag_service = build_rag_service(rag) if rag.enabled else None
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if print_config:
        typer.echo(_mode_expansion(config))
        return
    _warn_if_open(host, api_key, connection.allowed_origins)
    limits = _with_allowed_hosts(connection, host, api_key, allowed_hosts)
    run_server(
        config,
        host,
        port,
        api_key,
        max_waiting_requests,
        shutdown_timeout,
        served_model_name,
        max_queued_tokens,
        limits,
        rag_service,
        (guided_compile_timeout, guided_compile_budget),
        (reasoning_parser, tool_call_parser),
        http_log,
        other_names,
        root_path,
    )


def _check_context_flag(config: Any) -> None:
    """--max-model-len against the model's RoPE (with --rope-scaling and the mode's choices): a
    flag to change (exit 2, which systemd does not restart), found before anything listens. A
    model that cannot be found or read is left to the checks before binding (exit 1)."""
    if config.max_model_len is None:
        return
    from kvspill.engine.setup import plan_before_start

    try:
        plan_before_start(config)
    except InvalidParameterError:
        raise
    except KvspillError:
        return


def _http_log(disable_access: bool, quiet_endpoints: str | None, level: str) -> HttpLog:
    try:
        return HttpLog.from_flags(disable_access, quiet_endpoints, level)
    except ValueError as e:
        raise KvspillError(str(e)) from None


def _root_path(value: str) -> str:
    from kvspill.server.root_path import normalize_root_path

    try:
        return normalize_root_path(value)
    except ValueError as e:
        raise KvspillError(str(e)) from None


def _check_parsers(reasoning: str, tool_calls: str) -> None:
    from kvspill.server.reasoning import PARSERS
    from kvspill.server.tool_parsers import FORMATS

    if reasoning not in PARSERS:
        raise KvspillError(f"--reasoning-parser must be one of {', '.join(PARSERS)}, got {reasoning!r}")
    if tool_calls != "auto" and tool_calls not in FORMATS:
        raise KvspillError(
            f"--tool-call-parser {tool_calls}: kvspill reads tool calls as auto (from the chat template), "
            f"{', '.join(FORMATS)}; give one of those"
        )


def _mode_expansion(config: Any) -> str:
    """What --mode and the flags left out come to on this host now, as TOML comments: the context,
    its RoPE scaling, the cold path and the tiers start-up will size (engine/setup.plan_before_start)."""
    from kvspill.engine.setup import plan_before_start
    from kvspill.plan.fit import fit_line

    lines = [f"# --mode {config.mode} on this host now (a flag given above wins):"]
    try:
        resolved, startup = plan_before_start(config)
    except KvspillError as e:
        return "\n".join([*lines, f"#   start-up would stop: {e}".replace("\n", "\n#   ")])
    context = resolved.max_model_len or "the model's trained context"
    rope = json.dumps(resolved.rope_scaling) if resolved.rope_scaling else "the model's"
    lines += [
        f"#   max-model-len = {context}",
        f"#   rope-scaling = {rope}",
        f"#   cold-attention = {resolved.cold_attention!r}",
    ]
    if startup is not None:
        request = startup.plan.request
        lines += [
            f'#   cpu-kv-budget = "{request.ram_budget_bytes / GiB:.2f}GiB"',
            f'#   disk-kv-budget = "{request.disk_budget_bytes / GiB:.2f}GiB"',
            f"#   {fit_line(startup.plan)}",
        ]
    return "\n".join(lines)


def _origins(text: str | None) -> tuple[str, ...] | None:
    from kvspill.server.cors import parse_origins

    try:
        return parse_origins(text)
    except ValueError as e:  # json's errors are ValueErrors too
        raise KvspillError(
            f"--allowed-origins: {e}" if "--allowed-origins" not in str(e) else str(e)
        ) from None


def _tls(keyfile: str | None, certfile: str | None) -> tuple[str, str] | None:
    try:
        return check_tls_files(keyfile, certfile)
    except ValueError as e:
        raise KvspillError(str(e)) from None


def _checked_connection(limits: ConnectionLimits) -> ConnectionLimits:
    """`limits` once its flags are checked (KvspillError: which one to change)."""
    if limits.max_request_bytes is not None and limits.max_request_bytes < 1024:
        raise KvspillError(
            "--max-request-bytes must be at least 1024 (leave it out to size it from the model)"
        )
    if limits.limit_concurrency is not None and limits.limit_concurrency < 1:
        raise KvspillError("--limit-concurrency must be at least 1")
    if limits.timeout_keep_alive < 1 or limits.header_timeout <= 0 or limits.body_timeout <= 0:
        raise KvspillError(
            "--timeout-keep-alive, --header-timeout and --body-timeout must be positive seconds"
        )
    if limits.max_connections_per_client < 1:
        raise KvspillError("--max-connections-per-client must be at least 1")
    return limits


def _one_model(model: str | None, model_option: str | None) -> str | None:
    """MODEL or --model (the same one if both are given)."""
    if model_option is None:
        return model
    if model is not None and model != model_option:
        raise KvspillError(f"two models given: MODEL {model!r} and --model {model_option!r}; give one")
    return model_option


def _check_admission_flags(
    max_waiting_requests: int, max_queued_tokens: int | None, shutdown_timeout: float
) -> None:
    if max_waiting_requests < 1:
        raise KvspillError("--max-waiting-requests must be at least 1")
    if max_queued_tokens is not None and max_queued_tokens < 1:
        raise KvspillError(
            "--max-queued-tokens must be at least 1 (leave it out for what the KV tiers hold, at least 8 x max model len)"
        )
    if shutdown_timeout < 0:
        raise KvspillError("--shutdown-timeout must be 0 or more seconds")


def _check_guided_flags(guided_compile_timeout: float, guided_compile_budget: float) -> None:
    if guided_compile_timeout <= 0 or guided_compile_budget < 0:
        raise KvspillError(
            "--guided-compile-timeout must be positive seconds and --guided-compile-budget 0 or more"
        )


def _warn_if_open(host: str, api_key: str | None, origins: tuple[str, ...] | None = None) -> None:
    from kvspill.server.hosts import LOOPBACK_BINDS

    if host not in LOOPBACK_BINDS and not api_key:
        logger.warning(
            "binding to %s without --api-key: anyone who can reach this port can use the model", host
        )
    if origins is not None and "*" in origins and not api_key:
        logger.warning("--allowed-origins * without --api-key: any web page a user opens can use this server")


def _with_allowed_hosts(
    limits: ConnectionLimits, host: str, api_key: str | None, allowed_hosts: str | None
) -> ConnectionLimits:
    from kvspill.server.hosts import loopback_only_hosts

    return replace(limits, allowed_hosts=loopback_only_hosts(host, api_key, (allowed_hosts or "").split(",")))


def _profile(name: str, model: str | None, engine: EngineOptions, served: str | None) -> Any:
    from kvspill.registry.profiles import resolve_serve_profile

    source, options, profile_model = resolve_serve_profile(name, model, engine)
    return source, options, served or profile_model


def _served_model(
    given: tuple[str | None, str | None],
    profile: str | None,
    engine: EngineOptions,
    served_model_name: str | None,
    source: tuple[bool, str | None, str | None],
    fetch: bool,
) -> tuple[str | None, EngineOptions, str]:
    """(the model's local source, engine options, served name) of MODEL / --model or --profile: a
    registry name gives its files, a hub id not on this machine is pulled unless `offline`; either
    keeps the name it was given as the served name, as in vLLM. `source`: (--offline, --revision,
    --download-dir). Without `fetch` (--print-config) the model stays as given."""
    model = _one_model(*given)
    if profile is not None:  # the registry's model and flags; those given on the command line win
        model, engine, served_model_name = _profile(profile, model, engine, served_model_name)
    name = served_model_name or _default_name(model)
    return (local_model(model, *source) if fetch else model), engine, name


def _served_names(name: str) -> list[str]:
    """--served-model-name's names: comma-separated ones (a path with a comma is one name)."""
    if "," not in name or Path(name).exists():
        return [name]
    names = [n.strip() for n in name.split(",")]
    if not all(names):
        raise KvspillError(f"--served-model-name {name!r} has an empty name: give names like a,b")
    return names


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
    connection: ConnectionLimits | None = None,
    rag_service: Any = None,
    guided_compile: tuple[float, float] = (DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_COMPILE_BUDGET_S),
    parsers: tuple[str, str] = ("auto", "auto"),
    http_log: HttpLog | None = None,
    other_names: Sequence[str] = (),
    root_path: str = "",
) -> None:
    """Check, build the app (the engine loads on its thread), serve until SIGTERM, exit 1 when the
    engine failed to load. `guided_compile`: (--guided-compile-timeout, --guided-compile-budget)."""
    from kvspill.server import ServerSettings, create_app
    from kvspill.server.grammar_gate import GateSettings
    from kvspill.server.lifecycle import serve
    from kvspill.server.slow_clients import guarded_protocol

    try:
        check_before_binding(config, host, port)
        _plan_before_binding(config)
    except KvspillError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    limits = connection or ConnectionLimits()
    settings = ServerSettings(
        model_name,
        api_key=api_key,
        max_waiting_requests=max_waiting_requests,
        aliases={Path(model_name).name} if model_name else set(),
        max_queued_tokens=max_queued_tokens,
        max_request_bytes=limits.max_request_bytes,
        allowed_hosts=limits.allowed_hosts,
        allowed_origins=limits.allowed_origins,
        guided=GateSettings(timeout_s=guided_compile[0], budget_s=guided_compile[1]),
        reasoning_parser=parsers[0],
        tool_call_parser=parsers[1],
        more_names=tuple(other_names),
        root_path=root_path,
    )
    app = create_app(_engine_factory(config), settings)
    rag_jobs = None
    if rag_service is not None:
        from kvspill.server.rag_routes import mount_rag

        rag_jobs = mount_rag(app, rag_service)  # the routes; their index jobs are cancelled on SIGTERM
    serve(
        app,
        host,
        port,
        shutdown_timeout,
        http=guarded_protocol(limits.header_timeout, limits.body_timeout, limits.max_connections_per_client),
        limit_concurrency=limits.limit_concurrency,
        timeout_keep_alive=limits.timeout_keep_alive,
        http_log=http_log or HttpLog(),
        **({"ssl_keyfile": limits.tls[0], "ssl_certfile": limits.tls[1]} if limits.tls else {}),
    )
    _leave(app, rag_jobs, shutdown_timeout)


def _plan_before_binding(config: Any) -> None:
    """The memory plan from the model's shapes, before the port is bound: a context that even the
    mode's automatic tiers cannot hold stops here with the planner's advice (OutOfKVMemoryError),
    not after loading; otherwise one line says what the tiers will hold."""
    from kvspill.engine.setup import plan_before_start
    from kvspill.plan.fit import fit_line

    _, startup = plan_before_start(config)
    if startup is not None:
        logger.info("memory plan before loading: %s", fit_line(startup.plan))


def _engine_factory(config: Any) -> Callable[[], Any]:
    """What the server's engine thread calls: the engine, under the start-up display; a failure
    to load stops the server (SIGTERM to this process) after logging."""

    def factory() -> Any:
        from kvspill.cli.startup_display import startup_display
        from kvspill.engine.core import LLMEngine

        try:
            with startup_display():
                return LLMEngine(config)
        except Exception:
            logger.error("the engine failed to load; stopping the server")
            os.kill(os.getpid(), signal.SIGTERM)
            raise

    return factory


def _leave(app: Any, rag_jobs: Any, shutdown_timeout: float) -> None:
    """After the server stopped: exit 1 with the load error's line when the engine never loaded."""
    if rag_jobs is not None:  # an index job still inside an embedding batch must not hold the exit
        from kvspill.server.rag_app import leave_after_drain

        leave_after_drain(rag_jobs, shutdown_timeout, 1 if app.state.engine.load_error else 0)
    if app.state.engine.load_error:
        typer.echo(f"error: {app.state.engine.load_error}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `serve` command to `app`."""
    app.command("serve", cls=DialectCommand)(serve_command)  # vLLM's, SGLang's, llama-server's flags too
