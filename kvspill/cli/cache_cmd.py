"""`kvspill precache` and `kvspill cache ls|clear`: the prefix blocks of `--kv-persist-dir`.

`precache` prefills files as a prompt prefix in a one-shot engine and writes its blocks to the
persist dir (so it needs one), where a later `kvspill serve --kv-persist-dir` finds them. `cache ls`
reads every block file's header (no engine); `cache clear` deletes the block files.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Annotated

import typer

from kvspill.cli.engine_options import with_engine_options
from kvspill.errors import InvalidParameterError, KvspillError
from kvspill.options import EngineOptions, engine_kwargs

cache_app = typer.Typer(help="Show or clear the prefix KV blocks of --kv-persist-dir.", no_args_is_help=True)
PersistDirOpt = Annotated[str, typer.Option("--kv-persist-dir", help="The persist directory.")]


def _fail(e: Exception) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


@cache_app.command("ls")
def cache_ls(
    kv_persist_dir: PersistDirOpt,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Blocks per KV fingerprint (model + KV configuration), total bytes, and invalid files."""
    from kvspill.storage.persist import scan_dir

    good, bad = scan_dir(kv_persist_dir)
    per_fp = Counter(info.fingerprint for info in good)
    bytes_fp = Counter[int]()
    for info in good:
        bytes_fp[info.fingerprint] += info.file_bytes
    fingerprints = [(f"{fp:016x}", n, bytes_fp[fp]) for fp, n in per_fp.most_common()]
    total = sum(bytes_fp.values())
    if as_json:
        summary = {
            "dir": kv_persist_dir,
            "blocks": len(good),
            "bytes": total,
            "fingerprints": [{"fingerprint": fp, "blocks": n, "bytes": b} for fp, n, b in fingerprints],
            "invalid": [{"path": str(path), "why": why} for path, why in bad],
        }
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"{kv_persist_dir}: {len(good)} blocks, {total / 2**20:.1f} MiB")
    for fp, n, b in fingerprints:
        typer.echo(f"  fingerprint {fp}: {n} blocks, {b / 2**20:.1f} MiB")
    for path, why in bad:
        typer.echo(f"  invalid {path}: {why}")


@cache_app.command("clear")
def cache_clear(kv_persist_dir: PersistDirOpt) -> None:
    """Delete every block file in the directory (stop the servers using it first)."""
    from kvspill.storage.persist import clear_dir

    num_files, num_bytes = clear_dir(kv_persist_dir)
    typer.echo(f"removed {num_files} block files ({num_bytes / 2**20:.1f} MiB) from {kv_persist_dir}")


@with_engine_options
def precache(
    files: Annotated[list[str], typer.Argument(help="Files and directories: the prompt prefix.")],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="The model (default: the embedded one).")
    ] = None,
    prompt_template: Annotated[
        str,
        typer.Option(
            help="Prompt text around the files: must contain {files}; frame it as your requests will."
        ),
    ] = "{files}",
    *,
    engine: EngineOptions,
) -> None:
    """Prefill FILES as a prompt prefix and keep its KV blocks in --kv-persist-dir."""
    from kvspill.llm import LLM
    from kvspill.text.precache import build_prompt, precache_params, read_files, result_of

    try:
        kwargs = engine_kwargs(engine)
        if not kwargs.get("kv_persist_dir"):
            raise InvalidParameterError(
                "kv_persist_dir", "precache keeps blocks in files: give --kv-persist-dir (the server's)"
            )
        text = build_prompt(read_files(files), prompt_template)
        llm = LLM(model, **kwargs)
        out = llm.generate([text], precache_params())[0]
        llm.engine.close()  # every block written
        result = result_of(len(out.prompt_token_ids), out.num_cached_tokens, llm.engine.config.block_size)
        typer.echo(json.dumps(result.to_json()))
    except KvspillError as e:
        _fail(e)


def register(app: typer.Typer) -> None:
    """Add `precache` and the `cache` group to `app` (idempotent)."""
    if not any(g.name == "cache" for g in app.registered_groups):
        app.add_typer(cache_app, name="cache")
    if not any(c.name == "precache" for c in app.registered_commands):
        app.command("precache")(precache)
