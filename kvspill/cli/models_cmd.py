"""`kvspill models add|ls|rm|show|scan|profile|profile-rm`: the model registry from the shell.

Invariants:
- Every command takes `--data-dir` (or `KVSPILL_DATA_DIR`); default: the user's data dir.
- A user error (unknown name, duplicate, bad flag) is one `error:` line and exit 2.
- `--json` prints the rows as the manager's `/api/models` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvspill.cli.user_errors import fail as _fail
from kvspill.errors import KvspillError
from kvspill.plan.units import format_bytes

models_app = typer.Typer(help="The model registry: models and saved serving profiles.", no_args_is_help=True)

DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", envvar="KVSPILL_DATA_DIR", help="Registry folder (default: the user data dir)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _open(data_dir: Path | None) -> Any:
    from kvspill.registry import open_registry

    return open_registry(data_dir)


def _row(m: Any) -> str:
    size = format_bytes(m.size_bytes) if m.size_bytes else "-"
    return f"{m.name:<32} {m.kind:<9} {m.quantization or '-':<10} {size:>10}  {m.source}"


@models_app.command("add")
def add(
    source: Annotated[str, typer.Argument(help="A .gguf file, a model dir, or an HF id in the local cache.")],
    name: Annotated[str | None, typer.Option(help="Registry name (default: from the source).")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Register a model."""
    from kvspill.registry.sources import inspect_source

    try:
        entry = _open(data_dir).add_model(inspect_source(source, name))
    except KvspillError as e:
        _fail(e)
        return
    typer.echo(_row(entry))


@models_app.command("ls")
def ls(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """List the registered models and their profiles (the embedded model first, marked embedded)."""
    try:
        registry = _open(data_dir)
    except KvspillError as e:
        _fail(e)
        return
    models, profiles = registry.listed_models(), registry.profiles()
    if as_json:
        payload = {"models": [m.to_json() for m in models], "profiles": [p.to_json() for p in profiles]}
        typer.echo(json.dumps(payload, indent=2))
        return
    if not models:
        typer.echo(
            "no models: `kvspill pull ORG/NAME`, `kvspill models add SOURCE` or `kvspill models scan DIR`"
        )
    for m in models:
        typer.echo(_row(m))
    for p in profiles:
        typer.echo(f"profile {p.name} -> {p.model_name}: {_flags_text(p.flags)}")


def _flags_text(flags: dict[str, Any]) -> str:
    from kvspill.registry.profiles import serve_args

    return " ".join(serve_args(flags)) or "(engine defaults)"


@models_app.command("show")
def show(name: str, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """One model and its profiles."""
    try:
        registry = _open(data_dir)
        model = registry.model(name)
    except KvspillError as e:
        _fail(e)
        return
    profiles = registry.profiles(name)
    if as_json:
        typer.echo(json.dumps({**model.to_json(), "profiles": [p.to_json() for p in profiles]}, indent=2))
        return
    for key, value in model.to_json().items():
        typer.echo(f"{key:<13} {value}")
    for p in profiles:
        typer.echo(f"profile      {p.name}: {_flags_text(p.flags)}")


@models_app.command("rm")
def rm(name: str, data_dir: DataDirOpt = None) -> None:
    """Remove a model from the registry (and its profiles). A model `kvspill pull` downloaded
    has its files deleted from the Hugging Face cache; any other model's files stay on disk."""
    from kvspill.registry.cache_files import free_pulled_files

    try:
        registry = _open(data_dir)
        entry = registry.model(name)  # unknown: the error lists the registered names
        freed = free_pulled_files(entry, registry.models()) if entry.kind == "pulled" else None
        registry.remove_model(name)
    except KvspillError as e:
        _fail(e)
        return
    if freed is None:
        typer.echo(
            f"removed {name} from the registry; its files stay at {entry.source} (not downloaded by kvspill)"
        )
    else:
        typer.echo(f"removed {name}: freed {format_bytes(freed)} ({freed} bytes) of the Hugging Face cache")


@models_app.command("scan")
def scan(
    directory: Annotated[
        Path | None, typer.Argument(help="Folder to search for .gguf files and model dirs.")
    ] = None,
    hf_cache: Annotated[bool, typer.Option(help="Also list the models in the Hugging Face cache.")] = True,
    hf_cache_dir: Annotated[
        Path | None, typer.Option(help="The HF hub cache (default: huggingface_hub's).")
    ] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Find models and register the ones not registered yet (by source)."""
    from kvspill.registry.scan import ScanResult, scan_directory, scan_hf_cache

    try:
        registry = _open(data_dir)
        result = scan_directory(directory) if directory is not None else ScanResult()
        if hf_cache:
            scan_hf_cache(hf_cache_dir, result)
    except KvspillError as e:
        _fail(e)
        return
    known = {m.source for m in registry.models()}
    # a pulled model is also in the HF cache, as its repo id: not a second model
    known |= {m.name.split(":")[0] for m in registry.models() if m.kind == "pulled"}
    names = {m.name for m in registry.models()}
    for entry in result.found:
        if entry.source in known:
            continue
        if entry.name in names:
            typer.echo(
                f"skipped {entry.source}: the name {entry.name} is taken (`kvspill models add --name`)"
            )
            continue
        registry.add_model(entry)
        names.add(entry.name)
        typer.echo("added " + _row(entry))
    for line in result.skipped:
        typer.echo(f"skipped {line}", err=True)


@models_app.command("profile")
def profile(
    name: str,
    model: Annotated[str, typer.Option("--model", "-m", help="Registered model name.")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Engine flag as FIELD=VALUE, e.g. max_model_len=8192 (repeatable)."),
    ] = None,
    replace: Annotated[bool, typer.Option(help="Overwrite a profile of this name.")] = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Save a serving profile: the `kvspill serve` engine flags for a model (`serve --profile NAME`)."""
    from kvspill.registry.profiles import validate_flags

    try:
        flags = dict(_pair(item) for item in set_ or [])
        saved = _open(data_dir).save_profile(name, model, validate_flags(flags), replace=replace)
    except KvspillError as e:
        _fail(e)
        return
    typer.echo(f"profile {saved.name} -> {saved.model_name}: {_flags_text(saved.flags)}")


def _pair(item: str) -> tuple[str, str]:
    from kvspill.registry.store import RegistryError

    key, sep, value = item.partition("=")
    if not sep:
        raise RegistryError(f"--set {item!r}: write FIELD=VALUE, e.g. max_model_len=8192")
    return key.strip().replace("-", "_"), value.strip()


@models_app.command("profile-rm")
def profile_rm(name: str, data_dir: DataDirOpt = None) -> None:
    """Remove a saved profile."""
    try:
        _open(data_dir).remove_profile(name)
    except KvspillError as e:
        _fail(e)
    typer.echo(f"removed profile {name}")


@models_app.command("prepare")
def prepare(
    model: Annotated[
        str | None, typer.Argument(help="Local dir or .gguf file (default: the embedded model).")
    ] = None,
) -> None:
    """Do once what a first start would: convert a GGUF's config and tokenizer into the cache,
    measure the CPU's fast dtype, save the GGUF's weights dequantized to it, build the C++
    CPU-attention kernel and measure the CPU plan's rates, so the next `kvspill serve` starts in
    seconds."""
    import time

    from kvspill.gguf.cache import gguf_hf_config, gguf_tokenizer
    from kvspill.model.resolve import resolve_model
    from kvspill.plan.cpu_dtype import pick_cpu_dtype

    start = time.perf_counter()
    try:
        resolved = resolve_model(model)
    except KvspillError as e:
        _fail(e)
    dtype = pick_cpu_dtype()
    cached = ""
    if resolved.kind == "gguf":
        config = gguf_hf_config(resolved.path)
        gguf_tokenizer(resolved.path)
        cached = f", GGUF config and tokenizer cached, {_save_dense_weights(resolved.path, config, dtype)}"
    kernel = _build_cpu_kernels(gguf=resolved.kind == "gguf")
    rates = _cpu_plan_rates()
    typer.echo(
        f"prepared {resolved.display_name} in {time.perf_counter() - start:.1f} s "
        f"(CPU dtype {dtype}{cached}, {kernel}, {rates})"
    )


def _save_dense_weights(path: Path, config: Any, dtype_name: str) -> str:
    """Save the GGUF's weights dequantized to the CPU dtype, unless a valid copy is there (the CPU
    engine maps them at start instead of dequantizing: ~1.4 s of a 2-core start; issue 50); only
    where the engine dequantizes by default (plan/host_rates.cpu_keeps_gguf_blocks)."""
    import torch

    from kvspill.gguf.cache import open_dequantized
    from kvspill.model.gguf_weights import save_dense_weights
    from kvspill.plan import host_rates

    if torch.cuda.is_available():  # a GGUF stays in its quantized blocks on CUDA: no dense copy
        return "weights left quantized (CUDA)"
    if host_rates.cpu_keeps_gguf_blocks():  # the engine keeps the blocks (plan/startup)
        return "weights left quantized (the CPU GGUF kernel reads them)"
    if open_dequantized(path, dtype_name) is not None:
        return f"{dtype_name} weights already cached"
    saved = save_dense_weights(path, config, getattr(torch, dtype_name))
    return f"{dtype_name} weights cached" if saved is not None else "weights not cached (see the warning)"


def _cpu_plan_rates() -> str:
    """Measure (once, cached) the rates a CPU engine's memory plan divides by, so the first start
    does not (plan/host_rates.py: a child process, 2-4 s on a 2-core host)."""
    from kvspill.plan.calibrate import load_calibration
    from kvspill.plan.host_rates import cpu_host_bandwidths

    rates = cpu_host_bandwidths(load_calibration())
    return "CPU plan rates " + ("measured" if rates.cpu_rates_at else "at defaults")


def _build_cpu_kernels(gguf: bool) -> str:
    """Build the CPU engine's attention and decode ops kernels into their cache, and for a GGUF
    model the kernel of its quantized weights (`--quantization gguf`): engine start-up loads them on
    the CPU device; built there, a fresh host's first start took 13.9 s longer (issue 50)."""
    from kvspill.kernels import cpu_attention, cpu_decode_ops, cpu_gguf

    kernels = [("CPU attention", cpu_attention), ("CPU decode ops", cpu_decode_ops)]
    if gguf:
        kernels.append(("CPU GGUF", cpu_gguf))
    # load_kernel logs why and what to install when it cannot build; the engine then runs without it
    return ", ".join(
        f"{name} kernel built" if module.load_kernel() is not None else f"no {name} kernel"
        for name, module in kernels
    )


def register(app: typer.Typer) -> None:
    """Add the `models` group to `app` (idempotent)."""
    if not any(g.name == "models" for g in app.registered_groups):
        app.add_typer(models_app, name="models")
