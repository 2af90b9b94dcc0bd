"""What a model source is: its kind, format, quantization and size, read from headers only.

Invariants: reads a GGUF header or a config.json, never tensor data and never torch; an HF id is
looked up in the local cache only (no network). A source that is none of these is a
`RegistryError` naming the three forms that work.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kvspill.errors import KvspillError
from kvspill.plan.spec import ModelSpec
from kvspill.registry.store import ModelEntry, RegistryError


def _gguf_entry(path: Path, name: str | None) -> ModelEntry:
    try:
        spec = ModelSpec.from_gguf(path)
    except KvspillError as e:
        raise RegistryError(f"{path} is not a readable GGUF file: {e}") from e
    return ModelEntry(
        name=name or path.stem,
        source=str(path.resolve()),
        kind="gguf",
        format="gguf",
        quantization=spec.gguf_main_type,
        size_bytes=path.stat().st_size,
        added_at=time.time(),
    )


def _config_quantization(config: dict[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        return str(quant["quant_method"])
    dtype = config.get("torch_dtype") or config.get("dtype")
    return str(dtype) if dtype else None


def _weights_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


def _hf_dir_entry(
    directory: Path, name: str | None, kind: str = "hf_dir", source: str | None = None
) -> ModelEntry:
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise RegistryError(f"{directory}/config.json cannot be read as JSON: {e}") from e
    reason = embedding_model_reason(directory, config)
    if reason is not None:
        raise RegistryError(
            f"an embedding model, not an LLM ({reason}): kvspill serves it for RAG (`kvspill serve --rag`), "
            "not as a model to generate with"
        )
    return ModelEntry(
        name=name or (source if source else directory.resolve().name),
        source=source or str(directory.resolve()),
        kind=kind,
        format="safetensors",
        quantization=_config_quantization(config),
        size_bytes=_weights_size(directory),
        added_at=time.time(),
    )


# Architectures whose name says they generate text; anything else with no such head (BertModel,
# XLMRobertaModel, *ForMaskedLM, ...) is an encoder.
_LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def embedding_model_reason(directory: Path, config: dict[str, Any]) -> str | None:
    """Why `directory` holds an embedding model rather than an LLM, or None for an LLM."""
    for marker in ("modules.json", "config_sentence_transformers.json"):
        if (directory / marker).is_file():
            return f"a sentence-transformers model: it has {marker}"
    archs = [str(a) for a in config.get("architectures") or []]
    if archs and not any(a.endswith(_LM_HEADS) for a in archs):
        return f"architecture {archs[0]} has no language-model head"
    return None


def is_hf_model_dir(directory: Path) -> bool:
    return (directory / "config.json").is_file() and any(directory.glob("*.safetensors"))


def _cached_snapshot(model_id: str, hf_cache_dir: str | Path | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model_id, "config.json", cache_dir=hf_cache_dir)
    except ValueError:  # not a valid repo id
        return None
    return Path(found).parent if isinstance(found, str) else None


def inspect_source(
    source: str, name: str | None = None, hf_cache_dir: str | Path | None = None
) -> ModelEntry:
    """The registry entry of `source`: a .gguf file, a dir with config.json + *.safetensors (or a
    single .gguf), or an HF id (org/name) in the local cache."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _gguf_entry(path, name)
    if path.is_dir():
        if is_hf_model_dir(path):
            return _hf_dir_entry(path, name)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return _gguf_entry(ggufs[0], name)
        raise RegistryError(
            f"{path} holds no config.json with *.safetensors and {len(ggufs)} .gguf files: "
            "pass one .gguf file or a Hugging Face model dir"
        )
    if "/" in source and not path.exists():
        snapshot = _cached_snapshot(source, hf_cache_dir)
        if snapshot is not None:
            return _hf_dir_entry(snapshot, name, kind="hf_cache", source=source)
    raise RegistryError(
        f"{source!r} is not a .gguf file, a model dir (config.json + *.safetensors) or a Hugging Face "
        "id in the local cache (download it first with `kvspill pull ORG/NAME`)"
    )
