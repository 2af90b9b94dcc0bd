"""`kvspill rag index DIR | search QUERY | stats | check | repair`, `kvspill embed-serve`, and the
RAG flags of `kvspill serve` (`RagOptions`, `build_rag_service`).

Invariants:
- The CLI and the servers share one store (`--rag-db`, default ~/.cache/kvspill/rag.sqlite3):
  what `kvspill rag index` embedded, a server finds cached, and the reverse.
- A server needs `--rag-root`: the directory /precache/repo may read (no default: started from a
  home directory, the current directory held keys and credentials). Hidden files and the
  secrets deny-list are left out everywhere (`rag/access.py`); `--rag-include-hidden` and
  `--rag-deny` change that for the server and the CLI alike.
- Every flag also reads `KVSPILL_<FLAG>`. A user error (a `--rag-db` that cannot be opened
  included) prints one `error:` line and exits 2; a database busy past its timeout while an
  index writes, or found damaged by `rag check`, exits 1.
- `kvspill rag index` shows one line of progress on a terminal (nothing otherwise); Ctrl-C
  cancels it with the index left as it was, and exits 130. It loads the model only when a chunk
  must be embedded: an unchanged directory is re-indexed without it.
- `kvspill rag search` is hybrid (embedding and full-text rankings fused) unless `--mode dense`.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from kvspill.cli.user_errors import fail as _fail
from kvspill.cli.user_errors import refuse_empty_key
from kvspill.errors import KvspillError

logger = logging.getLogger("kvspill.rag")
DEFAULT_DB = "~/.cache/kvspill/rag.sqlite3"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
PROGRESS_S = 0.5  # how often the progress line is redrawn
_R = TypeVar("_R")


def _opt(help_: str, env: str, *names: str, panel: str | None = None) -> Any:
    return typer.Option(*names, help=help_, envvar=f"KVSPILL_{env}", rich_help_panel=panel)


def _model_opt(panel: str | None = None) -> Any:
    return _opt(
        "Embedding model: a local sentence-transformers directory (default: the packaged all-MiniLM-L6-v2).",
        "EMBEDDING_MODEL",
        "--embedding-model",
        panel=panel,
    )


def _db_opt(panel: str | None = None) -> Any:
    return _opt("SQLite file of the embedding cache and the search index.", "RAG_DB", "--rag-db", panel=panel)


def _root_opt(panel: str | None = None) -> Any:
    return _opt(
        "Directories /precache/repo may index lie under this one (required with --rag).",
        "RAG_ROOT",
        "--rag-root",
        panel=panel,
    )


def _hidden_opt(panel: str | None = None) -> Any:
    return _opt(
        "Also index hidden files and directories (names starting with '.'); the deny-list still applies.",
        "RAG_INCLUDE_HIDDEN",
        "--rag-include-hidden",
        panel=panel,
    )


def _deny_opt(panel: str | None = None) -> Any:
    return _opt(
        "More gitignore-style patterns never to index, comma-separated, added to the built-in "
        "deny-list of key, credential and token files.",
        "RAG_DENY",
        "--rag-deny",
        panel=panel,
    )


def _threads_opt(panel: str | None = None) -> Any:
    return _opt(
        "CPU threads for the embedding model (default: torch's, one per core).",
        "EMBEDDING_THREADS",
        "--embedding-threads",
        panel=panel,
    )


EmbeddingModelOpt = Annotated[str | None, _model_opt()]
RagDbOpt = Annotated[str, _db_opt()]
RagRootOpt = Annotated[str | None, _root_opt()]
ThreadsOpt = Annotated[int | None, _threads_opt()]
HiddenOpt = Annotated[bool, _hidden_opt()]
DenyOpt = Annotated[str | None, _deny_opt()]


@dataclass(frozen=True)
class RagOptions:
    """The RAG service's flags; `enabled` is `kvspill serve --rag` (or an --embedding-model)."""

    enabled: bool = False
    embedding_model: str | None = None
    rag_db: str = DEFAULT_DB
    rag_root: str | None = None
    embedding_threads: int | None = None
    rag_include_hidden: bool = False
    rag_deny: str | None = None  # comma-separated patterns


_RAG_PANEL = "RAG embedding cache"


def _serve_flags() -> dict[str, tuple[Any, Any]]:
    """name -> (typer annotation, default) of `kvspill serve`'s RAG flags."""
    enable = _opt(
        "Also serve the RAG routes: /v1/embeddings, /embed, /precache/repo, /search, /stats.",
        "RAG",
        "--rag/--no-rag",
        panel=_RAG_PANEL,
    )
    return {
        "rag_enabled": (Annotated[bool, enable], False),
        "embedding_model": (Annotated[str | None, _model_opt(_RAG_PANEL)], None),
        "rag_db": (Annotated[str, _db_opt(_RAG_PANEL)], DEFAULT_DB),
        "rag_root": (Annotated[str | None, _root_opt(_RAG_PANEL)], None),
        "embedding_threads": (Annotated[int | None, _threads_opt(_RAG_PANEL)], None),
        "rag_include_hidden": (Annotated[bool, _hidden_opt(_RAG_PANEL)], False),
        "rag_deny": (Annotated[str | None, _deny_opt(_RAG_PANEL)], None),
    }


def with_rag_options(fn: Callable[..., _R]) -> Callable[..., _R]:
    """Give command `fn` the RAG flags (`kvspill serve --rag ...`): `fn` declares a keyword-only
    `rag: RagOptions`; typer sees the flags in its place. --embedding-model implies --rag."""
    signature = inspect.signature(fn, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "rag"]
    flags = _serve_flags()
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, (annotation, default) in flags.items()
    ]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> _R:
        values = {name: kwargs.pop(name, default) for name, (_, default) in flags.items()}
        enabled = bool(values.pop("rag_enabled")) or values["embedding_model"] is not None
        return fn(*args, rag=RagOptions(enabled, **values), **kwargs)

    params = [*own, *added]
    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__annotations__["return"] = signature.return_annotation
    return command


def build_rag_service(options: RagOptions, lazy_model: bool = False) -> Any:
    """A `RagService` over the model and store the options name. The model loads now (seconds),
    or with `lazy_model` on its first use (`kvspill rag index`: an unchanged directory needs none)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: never the hub
    from kvspill.rag.access import AccessPolicy
    from kvspill.rag.service import RagService

    if options.embedding_threads is not None and options.embedding_threads < 1:
        raise KvspillError("--embedding-threads must be at least 1")
    if not options.rag_root:
        raise KvspillError(
            "the RAG service needs --rag-root DIR: the directory whose subdirectories /precache/repo may index "
            "(there is no default: the current directory may hold keys and credentials)"
        )
    root = Path(options.rag_root).expanduser()
    if not root.is_dir():
        raise KvspillError(f"--rag-root {root} is not a directory")
    db_path = Path(options.rag_db).expanduser()
    deny = tuple(p.strip() for p in (options.rag_deny or "").split(",") if p.strip())
    access = AccessPolicy.create([root], options.rag_include_hidden, deny, db_path)
    embedder = _embedder(options, lazy_model)
    store = _open_store(db_path)
    logger.info("RAG service: %s, cache %s, root %s", embedder.name, store.path, root)
    return RagService(embedder, store, access)


def _embedder(options: RagOptions, lazy: bool) -> Any:
    """The embedding model the options name, loaded now or (`lazy`) on first use."""
    from kvspill.rag.lazy_embedder import LazyEmbedder
    from kvspill.rag.model_dir import resolve_model_dir

    def load() -> Any:
        from kvspill.rag import model  # torch: imported only when a text must be embedded

        return model.load_embedder(options.embedding_model, options.embedding_threads)

    if not lazy:
        return load()
    return LazyEmbedder(resolve_model_dir(options.embedding_model)[1], load)


def _open_store(db_path: Path) -> Any:
    """The store at `db_path` (a damaged file is moved aside there); a file that cannot be opened
    at all (a directory, no permission, locked past the timeout) is a user error."""
    import sqlite3

    from kvspill.rag.errors import StoreBusyError
    from kvspill.rag.store import EmbeddingStore

    try:
        return EmbeddingStore(db_path)
    except (OSError, sqlite3.Error, StoreBusyError) as e:
        raise KvspillError(f"--rag-db {db_path} cannot be opened: {e}") from e


def _index_with_progress(run: Callable[[Any], _R]) -> _R:
    """`run(progress)` on a thread. On a terminal, one progress line on stderr, redrawn in place;
    Ctrl-C cancels the index (it stops at its next check, with the index as it was)."""
    from kvspill.rag.types import IndexProgress

    progress = IndexProgress()
    outcome: list[Any] = []
    finished = threading.Event()  # not Thread.join: a join cut by Ctrl-C may report a live thread gone

    def target() -> None:
        try:
            outcome.append(run(progress))
        except BaseException as e:  # re-raised on the caller's thread below
            outcome.append(e)
        finally:
            finished.set()

    thread = threading.Thread(target=target, name="rag-index", daemon=True)
    tty = sys.stderr.isatty()
    try:
        thread.start()
        while not finished.wait(PROGRESS_S):
            if tty:
                sys.stderr.write("\r\033[K" + progress.line())
                sys.stderr.flush()
    except KeyboardInterrupt:
        progress.request_cancel("interrupted (Ctrl-C)")
        typer.echo("\ninterrupted: stopping at the next file or embedding batch", err=True)
        finished.wait()
    finally:
        if tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


rag_app = typer.Typer(
    help="Embed a directory once, then search it (the RAG cache, without a server).", no_args_is_help=True
)


@rag_app.command("index")
def index_cmd(
    directory: Annotated[str, typer.Argument(help="Directory to index (under --rag-root).")],
    include: Annotated[list[str] | None, typer.Option(help="Glob of files to index (repeatable).")] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(help="Glob of files to leave out (repeatable).")
    ] = None,
    gitignore: Annotated[bool, typer.Option(help="Leave out what .gitignore files ignore.")] = True,
    allow_removal: Annotated[
        bool, typer.Option(help="Drop the chunks of files that are gone, even more than this adds.")
    ] = True,
    chunk_lines: Annotated[int, typer.Option(help="Lines per chunk.")] = 20,
    overlap_lines: Annotated[int, typer.Option(help="Lines each chunk shares with the one before.")] = 5,
    embedding_model: EmbeddingModelOpt = None,
    rag_db: RagDbOpt = DEFAULT_DB,
    rag_root: RagRootOpt = None,
    embedding_threads: ThreadsOpt = None,
    rag_include_hidden: HiddenOpt = False,
    rag_deny: DenyOpt = None,
) -> None:
    """Embed DIRECTORY's changed files into the cache (unchanged ones cost a hash)."""
    from kvspill.rag.errors import IndexCancelledError, StoreBusyError
    from kvspill.rag.files import FileFilter
    from kvspill.rag.types import ChunkingConfig

    try:
        chunking = ChunkingConfig(chunk_lines, overlap_lines)
    except ValueError as e:
        _fail(e)
    # On the command line DIRECTORY is relative to the current directory, and bounds what is read
    # unless --rag-root says otherwise.
    path = str(Path(directory).expanduser().absolute())
    try:
        service = build_rag_service(
            RagOptions(
                True,
                embedding_model,
                rag_db,
                rag_root or path,
                embedding_threads,
                rag_include_hidden,
                rag_deny,
            ),
            lazy_model=True,  # an unchanged directory is re-indexed without loading the model
        )
        file_filter = FileFilter(tuple(include or ()), tuple(exclude or ()), gitignore)
        report = _index_with_progress(
            lambda progress: service.precache_repo(path, file_filter, chunking, allow_removal, progress)
        )
    except KvspillError as e:
        _fail(e)
    except StoreBusyError as e:
        _fail(e, 1)
    except IndexCancelledError as e:
        _fail(f"{e}: nothing was written to the index (the vectors embedded so far stay cached)", 130)
    for skipped in report.skipped:
        typer.echo(f"skipped {skipped.path}: {skipped.reason}", err=True)
    typer.echo(
        json.dumps(
            {k: v for k, v in asdict(report).items() if k != "skipped"} | {"num_skipped": len(report.skipped)}
        )
    )


@rag_app.command("search")
def search_cmd(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Chunks to show.")] = 5,
    repo: Annotated[
        str | None, typer.Option(help="Search this indexed directory only (default: all).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a hit.")] = False,
    mode: Annotated[
        str,
        typer.Option(
            help="hybrid: the embedding ranking and a full-text ranking over identifiers, fused; "
            "dense: the embedding ranking alone."
        ),
    ] = "hybrid",
    embedding_model: EmbeddingModelOpt = None,
    rag_db: RagDbOpt = DEFAULT_DB,
    embedding_threads: ThreadsOpt = None,
) -> None:
    """Print the chunks of indexed directories that best match QUERY."""
    try:
        service = build_rag_service(RagOptions(True, embedding_model, rag_db, "/", embedding_threads))
        hits = service.search(query, top_k, repo, mode)
    except KvspillError as e:
        _fail(e)
    for hit in hits:
        if as_json:
            typer.echo(json.dumps(asdict(hit)))
        else:
            typer.echo(f"{hit.score:.3f}  {hit.repo}/{hit.path}:{hit.start_line}-{hit.end_line}")


@rag_app.command("stats")
def stats_cmd(
    embedding_model: EmbeddingModelOpt = None,
    rag_db: RagDbOpt = DEFAULT_DB,
) -> None:
    """Print what the cache holds (JSON)."""
    try:
        service = build_rag_service(RagOptions(True, embedding_model, rag_db, "/"))
    except KvspillError as e:
        _fail(e)
    typer.echo(json.dumps(service.stats(), indent=1))


@rag_app.command("check")
def check_cmd(rag_db: RagDbOpt = DEFAULT_DB) -> None:
    """Check the database (PRAGMA integrity_check): print ok, or what is wrong and exit 1."""
    import sqlite3

    from kvspill.rag.db_check import check_database

    path = Path(rag_db).expanduser()
    try:
        problem = check_database(path, full=True)
    except FileNotFoundError:
        _fail(f"no database at {path} (one is created by the first index or server start)", 1)
    except sqlite3.Error as e:
        _fail(f"{path} could not be checked: {e}", 1)
    if problem is not None:
        typer.echo(f"damaged: {path}: {problem}")
        typer.echo("`kvspill rag repair` moves it aside and starts an empty one (embeddings are recomputed)")
        raise typer.Exit(1)
    typer.echo(f"ok: {path}")


@rag_app.command("repair")
def repair_cmd(rag_db: RagDbOpt = DEFAULT_DB) -> None:
    """Move a damaged database aside (kept, renamed *.corrupt-TIME) and start an empty one.
    Stop the servers that use it first: they keep writing to the file they opened."""
    path = Path(rag_db).expanduser()
    existed = path.exists()
    try:
        from kvspill.rag.store import EmbeddingStore

        store = EmbeddingStore(path, check="full")
    except Exception as e:  # noqa: BLE001 - one line, whatever stopped it
        _fail(f"{path} could not be repaired: {type(e).__name__}: {e}", 1)
    store.close()
    if store.moved_aside is not None:
        typer.echo(
            f"repaired: {path} was damaged ({store.problem}); moved it aside to {store.moved_aside} and "
            "created an empty database: `kvspill rag index DIR` embeds your directories again"
        )
    elif existed:
        typer.echo(f"ok: {path} is sound; nothing to repair")
    else:
        typer.echo(f"no database at {path}: created an empty one")


def embed_serve(
    host: Annotated[str, _opt("Address to bind.", "HOST")] = "127.0.0.1",
    port: Annotated[int, _opt("Port to bind.", "PORT")] = 8000,
    api_key: Annotated[str | None, _opt("Require Authorization: Bearer <key>.", "API_KEY")] = None,
    embedding_model: EmbeddingModelOpt = None,
    rag_db: RagDbOpt = DEFAULT_DB,
    rag_root: RagRootOpt = None,
    embedding_threads: ThreadsOpt = None,
    rag_include_hidden: HiddenOpt = False,
    rag_deny: DenyOpt = None,
    shutdown_timeout: Annotated[
        float,
        _opt(
            "Seconds the server takes to stop on SIGTERM: index jobs are cancelled at once, other "
            "requests get this long to finish.",
            "SHUTDOWN_TIMEOUT",
        ),
    ] = 30.0,
) -> None:
    """Serve the embedding cache alone: /v1/embeddings, /embed, /precache/repo, /search, /stats."""
    from kvspill.server.rag_app import create_rag_app, serve_rag

    if shutdown_timeout < 0:
        _fail("--shutdown-timeout must be 0 or more seconds")
    refuse_empty_key(api_key)
    try:
        service = build_rag_service(
            RagOptions(
                True, embedding_model, rag_db, rag_root, embedding_threads, rag_include_hidden, rag_deny
            )
        )
    except KvspillError as e:
        _fail(e)
    if host not in _LOOPBACK and not api_key:
        logger.warning(
            "binding to %s without --api-key: anyone who can reach this port can read files under %s",
            host,
            service.allowed_root,
        )
    serve_rag(create_rag_app(service, api_key), host, port, shutdown_timeout)


def register(app: typer.Typer) -> None:
    """Add `rag` and `embed-serve` to `app` (idempotent)."""
    if not any(g.name == "rag" for g in app.registered_groups):
        app.add_typer(rag_app, name="rag")
    if not any(c.name == "embed-serve" for c in app.registered_commands):
        app.command("embed-serve")(embed_serve)
