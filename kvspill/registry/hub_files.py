"""Which files of a Hugging Face repo `kvspill pull` downloads, from the repo's file list alone.

A model reference is `org/name` (the safetensors checkpoint, else the repo's Q4_K_M GGUF),
`org/name:TAG` (the GGUF whose file name holds TAG, as llama.cpp's `-hf` names it) or
`org/name/path/file.gguf` (that file).

Invariants: pure (no network, no disk): the caller lists the repo and downloads what this
returns. A split GGUF (`-00001-of-00003.gguf`) is one model of all its parts, the first part
first. A reference that picks nothing, or more than one model, is a `RegistryError` that lists
the files to choose from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kvspill.registry.store import RegistryError

DEFAULT_GGUF_TAG = "Q4_K_M"  # llama.cpp's and Ollama's default quantization
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# What kvspill reads from a safetensors repo (model/loader.py, text/tokenizer.py): no .bin, .pt,
# .onnx, original/ or other frameworks' copies of the weights.
_SAFETENSORS_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "chat_template.jinja",
        "chat_template.json",
    }
)


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    tag: str | None = None  # a GGUF quantization tag, e.g. Q4_K_M
    filename: str | None = None  # an explicit .gguf path inside the repo

    def name(self, tag: str | None = None) -> str:
        """The registry name: the repo id, plus `:TAG` for a GGUF picked by tag (`tag`: the one
        chosen when none was asked for), or the explicit file's path."""
        if self.filename is not None:
            return f"{self.repo_id}/{self.filename}"
        tag = self.tag or tag
        return f"{self.repo_id}:{tag}" if tag else self.repo_id


def parse_ref(model: str) -> HubRef | None:
    """`model` as a hub reference, or None when it is not one (a local path, a registry name)."""
    base, sep, tag = model.partition(":")
    if sep and (not tag or "/" in tag):
        return None
    parts = base.split("/")
    if len(parts) > 2 and parts[-1].lower().endswith(".gguf") and not sep:
        repo_id, filename = "/".join(parts[:2]), "/".join(parts[2:])
        return HubRef(repo_id, filename=filename) if _REPO_ID.match(repo_id) else None
    if not _REPO_ID.match(base) or base.startswith("."):
        return None
    return HubRef(base, tag=tag.upper() or None)  # tags are case-insensitive; one row per tag


@dataclass(frozen=True)
class Selection:
    format: str  # safetensors | gguf
    files: tuple[str, ...]  # repo paths to download
    model_file: str | None  # the .gguf to run (a split GGUF's first part); None: the snapshot dir
    tag: str | None  # the GGUF tag the name carries (the one asked for, or the default)


def select_files(ref: HubRef, repo_files: list[str]) -> Selection:
    """The files to download for `ref` out of `repo_files` (every path in the repo)."""
    if ref.filename is not None:
        if ref.filename not in repo_files:
            raise RegistryError(
                f"{ref.repo_id} has no file {ref.filename}: pick one of {_listing(_ggufs(repo_files))}"
            )
        parts = _parts_of(ref.filename, repo_files)
        return Selection("gguf", parts, parts[0], None)
    if ref.tag is None and _has_safetensors(repo_files):
        files = tuple(sorted(f for f in repo_files if _is_safetensors_file(f)))
        return Selection("safetensors", files, None, None)
    ggufs = _ggufs(repo_files)
    if not ggufs:
        raise RegistryError(
            f"{ref.repo_id} has neither config.json with *.safetensors nor .gguf files (it has "
            f"{_listing(repo_files)}): kvspill runs those two formats; pick a repo that has one"
        )
    tag = ref.tag or DEFAULT_GGUF_TAG
    parts = _by_tag(ref, tag, ggufs)
    return Selection("gguf", parts, parts[0], tag)


def _by_tag(ref: HubRef, tag: str, ggufs: list[str]) -> tuple[str, ...]:
    """The one GGUF model whose file name holds `tag` (case-insensitive), else a RegistryError."""
    models = _group_parts(f for f in ggufs if tag.lower() in _basename(f).lower())
    if len(models) > 1:  # Q4_K also names Q4_K_M and Q4_K_S: prefer the tag at a word's end
        exact = [m for m in models if re.search(rf"{re.escape(tag)}(?=[.-]|$)", _basename(m[0]), re.I)]
        models = exact if len(exact) == 1 else models
    if len(models) == 1:
        return models[0]
    how = f"`kvspill pull {ref.repo_id}:TAG` or `kvspill pull {ref.repo_id}/FILE.gguf`"
    if not models:
        asked = f"no .gguf file of {ref.repo_id} holds {tag!r}" + ("" if ref.tag else " (the default tag)")
        raise RegistryError(f"{asked}: pass one with {how}; the repo has {_listing(ggufs)}")
    names = [m[0] for m in models]
    raise RegistryError(
        f"{tag!r} names several files of {ref.repo_id} ({_listing(names)}): pass one with {how}"
    )


def _parts_of(filename: str, repo_files: list[str]) -> tuple[str, ...]:
    """`filename`, or all the parts of the split GGUF it belongs to (first part first)."""
    match = _SPLIT.match(filename)
    if match is None:
        return (filename,)
    stem, count = match["stem"], int(match["count"])
    parts = tuple(f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))
    missing = [p for p in parts if p not in repo_files]
    if missing:
        raise RegistryError(f"the split GGUF {filename} misses parts in the repo: {_listing(missing)}")
    return parts


def _group_parts(files: Iterable[str]) -> list[tuple[str, ...]]:
    """The GGUF models among `files`: single files, and split ones grouped by their first part."""
    names = sorted(files)
    singles = [(f,) for f in names if _SPLIT.match(f) is None]
    firsts = [f for f in names if (m := _SPLIT.match(f)) is not None and int(m["part"]) == 1]
    return singles + [_parts_of(f, names) for f in firsts]


def split_parts(filename: str) -> tuple[int, int] | None:
    """(part, count) of a split GGUF's file name, else None."""
    match = _SPLIT.match(_basename(filename))
    return None if match is None else (int(match["part"]), int(match["count"]))


def _ggufs(repo_files: list[str]) -> list[str]:
    # mmproj files are vision projectors that sit beside the model, as llama.cpp skips them too
    return sorted(f for f in repo_files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())


def _has_safetensors(repo_files: list[str]) -> bool:
    return "config.json" in repo_files and any(
        f.endswith(".safetensors") and "/" not in f for f in repo_files
    )


def _is_safetensors_file(path: str) -> bool:
    return "/" not in path and (path in _SAFETENSORS_FILES or path.endswith(".safetensors"))


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _listing(files: list[str], limit: int = 12) -> str:
    shown = ", ".join(files[:limit]) or "no files"
    return shown + (f" and {len(files) - limit} more" if len(files) > limit else "")
