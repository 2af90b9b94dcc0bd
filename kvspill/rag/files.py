"""The files of a directory to index: glob filters, .gitignore files, size and encoding checks.

Invariants:
- Paths are POSIX and relative to the indexed directory; the walk never leaves it (symlinks
  to directories are not followed; a symlinked file is read only if it resolves inside).
- `.git` is never walked. Every `.gitignore` applies to its own directory and below (git's rules,
  through pathspec's GitIgnoreSpec).
- A file that cannot be indexed (too large, not UTF-8, binary, empty) is reported with its
  reason, never dropped in silence.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

from kvspill.rag.types import SkippedFile


@dataclass(frozen=True)
class FileFilter:
    include: tuple[str, ...] = ()  # gitignore-style globs; empty: every file
    exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, POSIX
    data: bytes


def read_text(data: bytes, max_bytes: int) -> tuple[str | None, str | None]:
    """(text, None) for an indexable file's bytes, else (None, why not)."""
    if len(data) > max_bytes:
        return None, f"larger than the {max_bytes} byte limit ({len(data)} bytes)"
    if not data.strip():
        return None, "empty"
    if b"\0" in data[:8192]:
        return None, "binary (contains NUL bytes)"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte {e.start}: {e.reason})"


def _gitignore_spec(directory: Path) -> pathspec.GitIgnoreSpec | None:
    ignore = directory / ".gitignore"
    if not ignore.is_file():
        return None
    return pathspec.GitIgnoreSpec.from_lines(
        ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    )


def _ignored(rel: str, is_dir: bool, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    """Whether `rel` (relative to the root) is ignored by the .gitignore files above it."""
    for base, spec in specs:
        sub = rel[len(base) + 1 :] if base else rel
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


def walk_files(root: Path, file_filter: FileFilter) -> Iterator[str]:
    """Relative paths of the files under `root` that pass `file_filter`, sorted per directory."""
    include = pathspec.GitIgnoreSpec.from_lines(file_filter.include) if file_filter.include else None
    exclude = pathspec.GitIgnoreSpec.from_lines(file_filter.exclude) if file_filter.exclude else None
    stack: list[tuple[Path, str, list[tuple[str, pathspec.GitIgnoreSpec]]]] = [(root, "", [])]
    while stack:
        directory, rel_dir, specs = stack.pop()
        if file_filter.respect_gitignore and (spec := _gitignore_spec(directory)) is not None:
            specs = [*specs, (rel_dir, spec)]
        entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.name == ".git" or _ignored(
                    rel, True, specs if file_filter.respect_gitignore else []
                ):
                    continue
                if exclude is not None and exclude.match_file(rel + "/"):
                    continue
                stack.append((Path(entry.path), rel, specs))
            elif entry.is_file():
                if file_filter.respect_gitignore and _ignored(rel, False, specs):
                    continue
                if exclude is not None and exclude.match_file(rel):
                    continue
                if include is not None and not include.match_file(rel):
                    continue
                yield rel


def iter_sources(root: Path, rel_paths: Iterable[str], max_bytes: int) -> Iterator[SourceFile | SkippedFile]:
    """Each file's bytes (one file in memory at a time), or why it cannot be read."""
    resolved_root = root.resolve()
    for rel in rel_paths:
        path = root / rel
        if path.is_symlink() and not path.resolve().is_relative_to(resolved_root):
            yield SkippedFile(rel, "a symlink that leads outside the indexed directory")
            continue
        try:
            size = path.stat().st_size
            if size > max_bytes:
                yield SkippedFile(rel, f"larger than the {max_bytes} byte limit ({size} bytes)")
                continue
            data = path.read_bytes()
        except OSError as e:
            yield SkippedFile(rel, f"unreadable: {e.strerror or e}")
            continue
        yield SourceFile(rel, data)
