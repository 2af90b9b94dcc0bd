"""`kvspill pull MODEL`: download a model from the Hugging Face Hub, check kvspill can run it,
and register it (the core is `kvspill/registry/pull.py`).

Invariants:
- A user error (bad id, unknown repo or tag, no network, HF_HUB_OFFLINE) is one `error:` line
  and exit 2; a model that downloaded but that kvspill cannot run is one line and exit 1, and is
  not registered (its files stay in the Hugging Face cache).
- Progress bars are huggingface_hub's own (HF_HUB_DISABLE_PROGRESS_BARS=1 hides them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvspill.cli.models_cmd import DataDirOpt
from kvspill.cli.user_errors import fail as _fail
from kvspill.errors import KvspillError
from kvspill.plan.units import format_bytes

_MODEL_HELP = (
    "A Hugging Face repo id (org/name: its safetensors, else its Q4_K_M GGUF), org/name:TAG for the "
    "GGUF whose file name holds TAG (e.g. Q8_0), or org/name/FILE.gguf."
)


def pull(
    model: Annotated[str, typer.Argument(help=_MODEL_HELP)],
    revision: Annotated[
        str | None, typer.Option(help="Branch, tag or commit of the repo (default: main).")
    ] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Download MODEL from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN, HF_HUB_CACHE apply; a
    dropped transfer resumes where it stopped) and register it: `kvspill serve MODEL` runs it."""
    from kvspill.registry import open_registry
    from kvspill.registry.pull import download_model

    try:
        registry = open_registry(data_dir)
        pulled = download_model(model, revision=revision)
    except KvspillError as e:
        _fail(e)
    try:
        _check_runnable(pulled.entry.source)
    except KvspillError as e:
        _fail(
            f"{pulled.entry.name} downloaded to {pulled.entry.source}, but kvspill cannot run it: {e}", code=1
        )
    registry.add_model(pulled.entry, replace=True)
    entry = pulled.entry
    size = format_bytes(entry.size_bytes or 0)
    typer.echo(
        f"pulled {entry.name}: {entry.format}, {entry.quantization or 'unquantized'}, {size} in "
        f"{len(pulled.selection.files)} files at {entry.source}"
    )
    # a safetensors repo is found in the HF cache by its id; a GGUF by its path
    model = entry.source if entry.format == "gguf" else pulled.ref.repo_id
    typer.echo(f"kvspill runs it: `kvspill serve {model}` (or --model {model})")


def _check_runnable(source: str) -> None:
    """What `kvspill serve` checks before it loads: found and complete (resolve_model), an
    architecture kvspill runs (serve_checks.check_model); a split GGUF is not read yet."""
    from kvspill.cli.serve_checks import check_model
    from kvspill.registry.hub_files import split_parts

    split = split_parts(source)
    if split is not None and split[1] > 1:
        raise KvspillError(
            f"it is a GGUF split into {split[1]} files and kvspill reads single files: merge them with "
            f"`llama-gguf-split --merge {Path(source).name} merged.gguf` and pass the merged file"
        )
    check_model(source)


def register(app: typer.Typer) -> None:
    """Add `pull` to `app` (idempotent)."""
    if not any(c.name == "pull" for c in app.registered_commands):
        app.command("pull")(pull)
