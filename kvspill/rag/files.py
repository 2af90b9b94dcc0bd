"""The files of a directory to index: glob filters, .gitignore files, the access policy, size and
encoding checks.

Invariants:
- Paths are POSIX and relative to the indexed directory; the walk never leaves it (symlinks
  to directories are not followed; a symlinked file is read only if it resolves inside). A
  symlink loop is skipped with its reason, never an error.
- Pattern matching is linear in the path's length: globs compile for RE2 (pathspec's re2
  backend), which never backtracks; Python's `re` took 87 s on `*?*?*?*?*?*?*?*?*?*?*#` with the
  GIL held (issue 48, item 4). A request's globs are bounded in number, length and wildcards.
- The walk checks its deadline, and its caller's cancel check, at every directory: a huge tree
  is a 400 (or a cancelled job), not a frozen server.
- `.git` is never walked. Every `.gitignore` applies to its own directory and below (git's rules,
  through pathspec's GitIgnoreSpec). The access policy's hidden-file rule, deny-list and the
  database's own files apply whatever the request's filters say.
- A file that cannot be indexed (too large, not UTF-8, binary, empty, a secret) is reported
  with its reason, never dropped in silence.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from kvspill.errors import InvalidParameterError
from kvspill.rag.access import AccessPolicy, is_hidden, secret_reason
from kvspill.rag.types import SkippedFile

MAX_PATTERNS = 256  # globs in one request's include + exclude
MAX_PATTERN_CHARS = 1024
MAX_WILDCARDS = 32  # '*' and '?' in one glob: real ones have a few
MAX_GITIGNORE_BYTES = 1024 * 1024  # a larger .gitignore is not read: its directory is skipped


@dataclass(frozen=True)
class FileFilter:
    include: tuple[str, ...] = ()  # gitignore-style globs; empty: every file
    exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, POSIX
    data: bytes


def compile_globs(lines: Sequence[str]) -> pathspec.GitIgnoreSpec:
    """A GitIgnoreSpec that matches in linear time (RE2)."""
    return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")


def check_filter(file_filter: FileFilter) -> None:
    """Refuse globs past the bounds (a 400 naming `include` or `exclude` and the bound)."""
    if len(file_filter.include) + len(file_filter.exclude) > MAX_PATTERNS:
        raise InvalidParameterError(
            "include", f"at most {MAX_PATTERNS} globs in include and exclude together"
        )
    for param, lines in (("include", file_filter.include), ("exclude", file_filter.exclude)):
        for line in lines:
            if len(line) > MAX_PATTERN_CHARS:
                raise InvalidParameterError(
                    param, f"a glob has {len(line)} characters; at most {MAX_PATTERN_CHARS}"
                )
            wildcards = line.count("*") + line.count("?")
            if wildcards > MAX_WILDCARDS:
                raise InvalidParameterError(
                    param, f"the glob {line[:80]!r} has {wildcards} wildcards; at most {MAX_WILDCARDS}"
                )
        try:
            compile_globs(lines)
        except (ValueError, TypeError) as e:  # pathspec's GitWildMatchPatternError is a ValueError
            raise InvalidParameterError(param, f"{param}: not a valid glob: {e}") from e


def read_text(data: bytes, max_bytes: int) -> tuple[str | None, str | None]:
    """(text, None) for an indexable file's bytes, else (None, why not)."""
    if len(data) > max_bytes:
        return None, f"larger than the {max_bytes} byte limit ({len(data)} bytes)"
    if not data.strip():
        return None, "empty"
    if b"\0" in data[:8192]:
        return None, "binary (contains NUL bytes)"
    if (why := secret_reason(data)) is not None:
        return None, why
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte {e.start}: {e.reason})"


def _gitignore_spec(directory: Path) -> pathspec.GitIgnoreSpec | None:
    ignore = directory / ".gitignore"
    if not ignore.is_file():
        return None
    if ignore.stat().st_size > MAX_GITIGNORE_BYTES:
        raise ValueError(f".gitignore is over {MAX_GITIGNORE_BYTES} bytes")
    return compile_globs(ignore.read_text(encoding="utf-8", errors="replace").splitlines())


def _ignored(rel: str, is_dir: bool, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    """Whether `rel` (relative to the root) is ignored by the .gitignore files above it."""
    for base, spec in specs:
        sub = rel[len(base) + 1 :] if base else rel
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


@dataclass
class _Rules:
    """One walk's compiled rules."""

    root: Path  # resolved
    file_filter: FileFilter
    policy: AccessPolicy | None
    include: pathspec.GitIgnoreSpec | None
    exclude: pathspec.GitIgnoreSpec | None
    deny: pathspec.GitIgnoreSpec | None

    def left_out(self, rel: str, name: str, is_dir: bool, specs: list) -> bool:
        """Whether the walk passes over `rel` (policy first: no request filter widens it)."""
        shown = rel + "/" if is_dir else rel
        if self.policy is not None:
            if not self.policy.include_hidden and is_hidden(name):
                return True
            if self.deny is not None and self.deny.match_file(shown):
                return True
        if is_dir and name == ".git":
            return True
        if self.file_filter.respect_gitignore and _ignored(rel, is_dir, specs):
            return True
        if self.exclude is not None and self.exclude.match_file(shown):
            return True
        return not is_dir and self.include is not None and not self.include.match_file(rel)


def _rules(root: Path, file_filter: FileFilter, policy: AccessPolicy | None) -> _Rules:
    check_filter(file_filter)
    return _Rules(
        root.resolve(),
        file_filter,
        policy,
        compile_globs(file_filter.include) if file_filter.include else None,
        compile_globs(file_filter.exclude) if file_filter.exclude else None,
        compile_globs(policy.deny) if policy is not None else None,
    )


def walk_files(
    root: Path,
    file_filter: FileFilter,
    policy: AccessPolicy | None = None,
    deadline: float | None = None,
    skipped: list[SkippedFile] | None = None,
    check: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Relative paths of the files under `root` that pass `file_filter` and `policy`, sorted per
    directory. `deadline` (time.monotonic()) past: InvalidParameterError. Entries that cannot be
    walked (symlink loops, unreadable directories) go to `skipped` with their reason. `check()`
    runs before each directory (an index's cancel check: it raises to stop the walk)."""
    rules = _rules(root, file_filter, policy)
    notes = skipped if skipped is not None else []
    stack: list[tuple[Path, str, list[tuple[str, pathspec.GitIgnoreSpec]]]] = [(root, "", [])]
    while stack:
        if check is not None:
            check()
        if deadline is not None and time.monotonic() > deadline:
            raise InvalidParameterError(
                "path",
                f"listing the files under {root} ran past its deadline: narrow it with include/exclude",
            )
        directory, rel_dir, specs = stack.pop()
        try:
            if file_filter.respect_gitignore and (spec := _gitignore_spec(directory)) is not None:
                specs = [*specs, (rel_dir, spec)]
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except (OSError, ValueError) as e:
            notes.append(SkippedFile(rel_dir or ".", f"directory not read: {e}"))
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            kind = _kind(entry, rules)
            if kind is None:
                notes.append(SkippedFile(rel, "a symlink loop or an entry that cannot be read"))
            elif kind in ("private", "other") or rules.left_out(rel, entry.name, kind == "dir", specs):
                continue
            elif kind == "dir":
                stack.append((Path(entry.path), rel, specs))
            else:
                yield rel


def _kind(entry: os.DirEntry, rules: _Rules) -> str | None:
    """ "dir", "file", "private" (the database's), "other" (sockets, FIFOs, links to directories),
    or None when the entry cannot be read (a symlink loop: ELOOP)."""
    try:
        kind = "dir" if entry.is_dir(follow_symlinks=False) else "file" if entry.is_file() else "other"
        policy = rules.policy
        if kind != "other" and policy is not None and policy.may_be_private(entry.name):
            if policy.is_private(Path(entry.path).resolve(), rules.root):
                return "private"
        return kind
    except (OSError, RuntimeError):  # ELOOP from stat; pathlib's resolve() raises RuntimeError on loops
        return None


def iter_sources(root: Path, rel_paths: Iterable[str], max_bytes: int) -> Iterator[SourceFile | SkippedFile]:
    """Each file's bytes (one file in memory at a time), or why it cannot be read."""
    resolved_root = root.resolve()
    for rel in rel_paths:
        path = root / rel
        try:
            if path.is_symlink() and not path.resolve().is_relative_to(resolved_root):
                yield SkippedFile(rel, "a symlink that leads outside the indexed directory")
                continue
            size = path.stat().st_size
            if size > max_bytes:
                yield SkippedFile(rel, f"larger than the {max_bytes} byte limit ({size} bytes)")
                continue
            data = path.read_bytes()
        except (OSError, RuntimeError) as e:
            yield SkippedFile(rel, f"unreadable: {getattr(e, 'strerror', None) or e}")
            continue
        yield SourceFile(rel, data)
