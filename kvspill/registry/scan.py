"""Find models on disk: GGUF files and HF model dirs under a directory, and the HF cache.

Invariants: a model dir is not searched further (its shards are not separate models); files that
cannot be read are reported beside the found ones, never fatal; the HF cache is read through
huggingface_hub's own `scan_cache_dir` (no network).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kvspill.registry.sources import inspect_source, is_hf_model_dir
from kvspill.registry.store import ModelEntry, RegistryError


@dataclass
class ScanResult:
    found: list[ModelEntry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: why"


def scan_directory(root: Path, result: ScanResult | None = None) -> ScanResult:
    result = result or ScanResult()
    if not root.is_dir():
        raise RegistryError(f"{root} is not a directory: pass the folder to scan")
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):  # model folders are often links
        here = Path(dirpath)
        if is_hf_model_dir(here):
            dirnames.clear()
            _try_add(str(here), result)
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for filename in sorted(filenames):
            if filename.lower().endswith(".gguf"):
                _try_add(str(here / filename), result)
    return result


def scan_hf_cache(hf_cache_dir: str | Path | None = None, result: ScanResult | None = None) -> ScanResult:
    """Models (repo type `model` with a config.json) in the local Hugging Face cache."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    result = result or ScanResult()
    try:
        info = scan_cache_dir(hf_cache_dir)
    except CacheNotFound:
        return result
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type == "model":
            _try_add(repo.repo_id, result, hf_cache_dir)
    return result


def _try_add(source: str, result: ScanResult, hf_cache_dir: str | Path | None = None) -> None:
    try:
        result.found.append(inspect_source(source, hf_cache_dir=hf_cache_dir))
    except RegistryError as e:
        result.skipped.append(f"{source}: {e}")
