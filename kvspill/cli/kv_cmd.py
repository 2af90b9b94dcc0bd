"""`kvspill kv ls|lookup|pin|unpin|move|clear|check`: the KV cache management API of a running server.

Only HTTP (`/v1/kv/prefixes`, `/v1/kv/lookup|pin|unpin|move|clear`, server/kv_routes.py); it never
imports the engine. The seed's window service, command by command: `window_stats` is `kv ls` (and
`kvspill status`), `test_window_service` is `kv check` (docs/prefix_cache.md).

Exit status: 0 done; 1 the server refused (its OpenAI-shaped message is printed as `error: ...`)
or cannot be reached; 2 bad arguments.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

kv_app = typer.Typer(
    help="Cached prefixes of a running server: list, look up, pin, move, clear.", no_args_is_help=True
)
UrlOpt = Annotated[str, typer.Option(envvar="KVSPILL_URL", help="The server.")]
KeyOpt = Annotated[str | None, typer.Option(envvar="KVSPILL_API_KEY", help="The server's --api-key.")]
TierArg = Annotated[str, typer.Argument(help="gpu, cpu or disk.")]
PrefixArg = Annotated[str, typer.Argument(help="A prefix's name, as `kvspill kv ls` lists it.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 30.0  # a move of a long prefix copies its blocks before answering


class ServerRefused(Exception):
    """The server answered with an error (its message) or could not be reached."""


def request(url: str, path: str, api_key: str | None, body: dict[str, Any] | None = None) -> Any:
    """GET `path` (POST with `body`) on the server at `url`; the JSON answer, or ServerRefused."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        raise ServerRefused(f"{e.code}: {_message(e.read())}") from e
    except OSError as e:
        raise ServerRefused(f"no kvspill server at {url} ({e}); start one with `kvspill serve`") from e


def _message(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:200]


def _call(url: str, path: str, api_key: str | None, body: dict[str, Any] | None = None) -> Any:
    try:
        return request(url, path, api_key, body)
    except ServerRefused as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e


def format_prefixes(rows: list[dict[str, Any]], now: float) -> str:
    """One line per prefix: name, tokens cached of all, blocks per tier, hits, age, pin, persisted."""
    if not rows:
        return "no cached prefixes (a request's blocks are listed once it finishes)"
    lines = [
        f"{'prefix':<16}  {'tokens':>13}  {'gpu':>5} {'cpu':>5} {'disk':>5}  {'hits':>5}  {'used':>8}  pinned  persisted"
    ]
    for r in rows:
        blocks = r["blocks"]
        persisted = "-" if r["persisted"] is None else ("yes" if r["persisted"] else "no")
        lines.append(
            f"{r['prefix']:<16}  {r['cached_tokens']:>6}/{r['tokens']:<6}  {blocks['gpu']:>5} {blocks['cpu']:>5} "
            f"{blocks['disk']:>5}  {r['hits']:>5}  {_ago(now - r['last_use']):>8}  {r['pinned'] or '-':<6}  {persisted}"
        )
    return "\n".join(lines)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{max(seconds, 0):.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.0f}h ago"


def _op_line(result: dict[str, Any]) -> str:
    where = f" in the {result['tier']} tier" if result.get("tier") else ""
    line = f"{result['op']} {result['prefix'] or 'every prefix'}{where}: {result['blocks']} blocks ({result['tokens']} tokens)"
    if result["blocks_in_use"]:
        line += f"; {result['blocks_in_use']} blocks held by running requests stay where they are"
    if result["persisted_files_removed"]:
        line += f"; {result['persisted_files_removed']} persisted files removed"
    return line


@kv_app.command("ls")
def kv_ls(url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None, as_json: JsonOpt = False) -> None:
    """The cached prefixes: tokens, blocks per tier, hits, last use, pin, persisted."""
    rows = _call(url, "/v1/kv/prefixes", api_key)["data"]
    typer.echo(json.dumps(rows, indent=2) if as_json else format_prefixes(rows, time.time()))


@kv_app.command("lookup")
def kv_lookup(
    text: Annotated[str | None, typer.Argument(help="The prompt's text (tokenized by the server).")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the prompt's text from a file.")] = None,
    token_ids: Annotated[str | None, typer.Option(help="The prompt as token ids: 1,2,3.")] = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """How many leading tokens of a prompt the server's tiers hold, per tier."""
    prompt = _prompt(text, file, token_ids)
    result = _call(url, "/v1/kv/lookup", api_key, {"prompt": prompt})
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    tiers = ", ".join(f"{name} {n}" for name, n in result["tiers"].items())
    typer.echo(f"{result['cached_tokens']} of {result['prompt_tokens']} tokens cached ({tiers})")
    if result["persisted_tokens"] is not None:
        typer.echo(f"{result['persisted_tokens']} leading tokens in the tiers or the persist dir")
    if result["prefix"]:
        typer.echo(f"prefix {result['prefix']}")


def _prompt(text: str | None, file: Path | None, token_ids: str | None) -> str | list[int]:
    given = [x for x in (text, file, token_ids) if x is not None]
    if len(given) != 1:
        typer.echo("error: give the prompt's TEXT, --file or --token-ids (one of them)", err=True)
        raise typer.Exit(2)
    if token_ids is not None:
        try:
            return [int(t) for t in token_ids.replace(" ", "").split(",") if t]
        except ValueError as e:
            typer.echo(f"error: --token-ids takes integers separated by commas ({e})", err=True)
            raise typer.Exit(2) from e
    if file is not None:
        try:
            return file.read_text()
        except OSError as e:
            typer.echo(f"error: cannot read {file}: {e}", err=True)
            raise typer.Exit(2) from e
    assert text is not None
    return text


@kv_app.command("pin")
def kv_pin(prefix: PrefixArg, tier: TierArg, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """Move a prefix to a tier and keep it there (within the server's --kv-pin-share)."""
    typer.echo(_op_line(_call(url, "/v1/kv/pin", api_key, {"prefix": prefix, "tier": tier})))


@kv_app.command("unpin")
def kv_unpin(prefix: PrefixArg, tier: TierArg, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """Let a pinned prefix be evicted again."""
    typer.echo(_op_line(_call(url, "/v1/kv/unpin", api_key, {"prefix": prefix, "tier": tier})))


@kv_app.command("move")
def kv_move(
    prefix: PrefixArg,
    tier: TierArg,
    partial: Annotated[bool, typer.Option(help="Move the leading blocks that fit when not all do.")] = False,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Move a prefix's cached blocks to a tier now (offload to disk, promote to the GPU)."""
    body = {"prefix": prefix, "tier": tier, "partial": partial}
    typer.echo(_op_line(_call(url, "/v1/kv/move", api_key, body)))


@kv_app.command("clear")
def kv_clear(
    prefix: Annotated[str | None, typer.Argument(help="The prefix to drop (or --all).")] = None,
    all_prefixes: Annotated[bool, typer.Option("--all", help="Drop every cached prefix.")] = False,
    persisted: Annotated[bool, typer.Option(help="Also delete their --kv-persist-dir files.")] = False,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Drop one cached prefix, or every one, from all tiers."""
    if (prefix is not None) == all_prefixes:
        typer.echo("error: give a PREFIX or --all (one of them)", err=True)
        raise typer.Exit(2)
    body: dict[str, Any] = {"persisted": persisted}
    body.update({"all": True} if all_prefixes else {"prefix": prefix})
    typer.echo(_op_line(_call(url, "/v1/kv/clear", api_key, body)))


@kv_app.command("check")
def kv_check(url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """A smoke run of the cache API (the seed's test_window_service): list the prefixes, look up a
    one-token prompt. Changes nothing on the server."""
    for line in smoke(url, api_key):
        typer.echo(line)


def smoke(url: str, api_key: str | None) -> list[str]:
    """`kv check`'s lines (`kvspill doctor --url` can run it too); exit 1 on the first refusal."""
    rows = _call(url, "/v1/kv/prefixes", api_key)["data"]
    lookup = _call(url, "/v1/kv/lookup", api_key, {"prompt": [1]})
    return [
        f"ok  GET /v1/kv/prefixes: {len(rows)} cached prefixes",
        f"ok  POST /v1/kv/lookup: {lookup['cached_tokens']} of {lookup['prompt_tokens']} tokens cached",
    ]


def register(app: typer.Typer) -> None:
    """Add the `kv` group to `app` (idempotent)."""
    if not any(g.name == "kv" for g in app.registered_groups):
        app.add_typer(kv_app, name="kv")
