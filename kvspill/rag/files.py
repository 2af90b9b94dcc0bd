"""The files of a directory to index: glob filters, .gitignore files, the access policy, size and
encoding checks.

Invariants:
- Paths are POSIX and relative to the indexed directory; the walk never leaves it (symlinks
  to directories are not followed; a symlinked file is read only if it resolves inside). A
  symlink loop is skipped with its reason, never an error.
- Pattern matching is linear in the path's length: globs compile for RE2 (pathspec's re2
  backend), which never backtracks; Python's `re` took 87 s on `*?*?*?*?*?*?*?*?*?*?*#` with the
  GIL held (issue 48, item 4). A request's globs are bounded in number, length and wildcards.
- RE2 compiles a list of globs into sets of at most `RE2_MAX_MEM` bytes each, at most
  `MAX_GLOB_SETS` of them: a list one set cannot hold (a .gitignore of 5,000 lines, 64 long
  request globs) is split over several, matched with pathspec's own rules (the last matching
  line wins). A list that still does not compile is a `GlobCompileError` (a ValueError): a 400
  naming `include`/`exclude` for a request, the directory skipped with its reason for a .gitignore.
- The policy (hidden names, the deny-list, `.git`, the database's files) holds for where a path
  leads, not only for its name: every component of a requested directory below its root
  (`PathRules.check_requested`), and the target of every symlinked file (resolved, relative to
  the indexed directory). Deny-list lines with a slash inside match below any folder too, since a
  client may name any folder as the one to index. The database's files are recognised by their
  resolved path and their inode, never by name alone.
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
import re2  # type: ignore[import-untyped]
from pathspec._backends.re2.gitignore import Re2GiBackend
from pathspec.backend import BackendNamesHint, _Backend
from pathspec.pattern import Pattern, RegexPattern

from kvspill.errors import ForbiddenPathError, InvalidParameterError
from kvspill.rag.access import AccessPolicy, is_hidden, secret_reason
from kvspill.rag.types import SkippedFile

MAX_PATTERNS = 256  # globs in one request's include + exclude
MAX_PATTERN_CHARS = 1024
MAX_WILDCARDS = 32  # '*' and '?' in one glob: real ones have a few
MAX_GITIGNORE_BYTES = 1024 * 1024  # a larger .gitignore is not read: its directory is skipped
# RE2's memory bound for one compiled set (its program and its DFA cache; the DFA grows only as
# paths need it). RE2's default, 8 MiB, held neither a .gitignore of 5,000 plain lines (16 MiB)
# nor 64 request globs of 874 characters with 30 wildcards (16 MiB); 256 globs of 1,000
# characters with 32 wildcards, the request bounds, need 64 MiB: two sets of 32 MiB.
RE2_MAX_MEM = 32 << 20
MAX_GLOB_SETS = 16  # sets per glob list: at most 512 MiB of RE2 budget for one list


class GlobCompileError(ValueError):
    """A list of globs that RE2 cannot compile within `MAX_GLOB_SETS` sets of `RE2_MAX_MEM`."""


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / (1 << 20):.3g} MiB"


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # a failed compile is an exception here, not a line on stderr
    options.never_capture = True  # as pathspec's re2 backend: sets cannot use groups
    return options


class _Re2Sets(_Backend):
    """pathspec's RE2 backend for a GitIgnoreSpec (`Re2GiBackend`), its regexes compiled into as
    many RE2 sets of `RE2_MAX_MEM` as they need (a list one set cannot hold is halved until each
    part compiles). A path's matches from every set decide as pathspec's reference (simple)
    backend does: the last line that matches it as a file, else the last that matches a folder
    above it."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        by_index = {
            i: p for i, p in enumerate(patterns) if isinstance(p, RegexPattern) and p.include is not None
        }
        self._sets: list[tuple[re2.Set, list]] = []
        todo = [list(by_index)] if by_index else []
        while todo:
            indices = todo.pop()
            regex_set = re2.Set.SearchSet(_re2_options())
            try:
                data = Re2GiBackend._init_set(
                    debug=False,
                    patterns={i: by_index[i] for i in indices},
                    regex_set=regex_set,
                    sort_indices=None,
                )
            except re2.error as e:
                if len(indices) == 1:
                    line = str(getattr(by_index[indices[0]], "pattern", indices[0]))
                    raise GlobCompileError(
                        f"the glob {line[:80]!r} does not compile within RE2's {_mib(RE2_MAX_MEM)} bound ({e})"
                    ) from e
                half = len(indices) // 2
                todo += [indices[half:], indices[:half]]  # the first half is compiled first
                continue
            self._sets.append((regex_set, data))
            if len(self._sets) > MAX_GLOB_SETS:
                raise GlobCompileError(
                    f"{len(by_index)} globs need more than {MAX_GLOB_SETS} RE2 sets of {_mib(RE2_MAX_MEM)}"
                )

    def match_file(self, file: str) -> tuple[bool | None, int | None]:
        best_file = best_dir = None
        for regex_set, data in self._sets:
            for i in regex_set.Match(file) or ():
                dat = data[i]
                if dat.is_dir_pattern:
                    best_dir = dat if best_dir is None or dat.index > best_dir.index else best_dir
                else:
                    best_file = dat if best_file is None or dat.index > best_file.index else best_file
        # pathspec's SimpleGiBackend: the last line matching the path as a file, else as a folder
        best = best_file or best_dir
        return (best.include, best.index) if best is not None else (None, None)


class _GlobSpec(pathspec.GitIgnoreSpec):
    """A GitIgnoreSpec matched by `_Re2Sets`."""

    @staticmethod
    def _make_backend(name: BackendNamesHint, patterns: Sequence[Pattern]) -> _Backend:
        return _Re2Sets(patterns)


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
    """A GitIgnoreSpec that matches in linear time (RE2). GlobCompileError (a ValueError) when
    RE2 cannot compile the lines within its bounds."""
    return _GlobSpec.from_lines(lines, backend="re2")


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
        except GlobCompileError as e:
            raise InvalidParameterError(
                param,
                f"{param}: the globs are too large for the matcher to compile: {e}. Send fewer "
                "globs, or shorter ones with fewer wildcards",
            ) from e
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


def _deny_lines(deny: Sequence[str]) -> list[str]:
    """The deny-list, each line with a slash inside also matched below any folder (`**/`): a
    client may index any folder, and `.config/gh/` must hold inside `home/` as inside `.config`'s
    parent."""
    lines = list(deny)
    for line in deny:
        body = line.strip()
        if body and not body.startswith(("#", "!", "**/")) and "/" in body.rstrip("/"):
            lines.append("**/" + body.lstrip("/"))
    return lines


class PathRules:
    """The access policy's rules for paths, compiled once: hidden names (unless the policy
    includes them), `.git`, the deny-list (`_deny_lines`)."""

    def __init__(self, policy: AccessPolicy) -> None:
        self.policy = policy
        self.deny = compile_globs(_deny_lines(policy.deny))

    def denied(self, rel: str, is_dir: bool) -> bool:
        """Whether the deny-list matches `rel` (POSIX, relative to a root)."""
        return bool(self.deny.match_file(rel + "/" if is_dir else rel))

    def refusal(self, parts: Sequence[str], is_dir: bool) -> str | None:
        """Why the path of `parts` (relative to a root) is never read, checked at every component
        (a folder's rules hold for all below it); None when it may be."""
        for i, name in enumerate(parts):
            rel = "/".join(parts[: i + 1])
            as_dir = is_dir or i < len(parts) - 1
            if name == ".git":
                return f"{rel} is inside .git, which is never indexed"
            if is_hidden(name) and not self.policy.include_hidden:
                return f"{rel} is hidden (a name starting with '.'; --rag-include-hidden allows it)"
            if self.denied(rel, as_dir):
                return f"{rel} is on the deny-list of key, credential and token paths"
        return None

    def path_refusal(self, resolved: Path) -> str | None:
        """Why the directory (or file) `resolved` must not be indexed, relative to its root: every
        component below the root, and its own name where it is the root itself; None if it may."""
        root = self.policy.root_of(resolved)
        if root is None:
            return None  # check_inside's business
        parts = resolved.relative_to(root).parts or ((resolved.name,) if resolved.name else ())
        return self.refusal(parts, resolved.is_dir())

    def check_requested(self, resolved: Path, given: str, param: str) -> Path:
        """The root holding `resolved` (a path a client named, symlinks resolved); a
        ForbiddenPathError (403) naming `given` when it lies outside every root, or when the
        policy leaves it out (hidden, `.git`, deny-listed, at any component below its root)."""
        root = self.policy.check_inside(resolved, given, param)
        if (why := self.path_refusal(resolved)) is not None:
            raise ForbiddenPathError(
                param,
                f"{given} is not indexed: {why}. Hidden folders and files, .git and the deny-list "
                "(.ssh/, .kube/, .aws/, .env, keys, ...) are never read, whichever folder is asked for: "
                "give a directory outside them",
            )
        return root


def _gitignore_spec(directory: Path, guard: _Guard | None) -> pathspec.GitIgnoreSpec | None:
    ignore = directory / ".gitignore"
    if not ignore.is_file():
        return None
    st = ignore.stat()
    if guard is not None and (guard.is_db(st) or guard.is_db_path(ignore.resolve())):
        raise ValueError(".gitignore is the cache database's file (a link): never opened")
    if st.st_size > MAX_GITIGNORE_BYTES:
        raise ValueError(f".gitignore is over {MAX_GITIGNORE_BYTES} bytes")
    try:
        return compile_globs(ignore.read_text(encoding="utf-8", errors="replace").splitlines())
    except GlobCompileError as e:
        raise GlobCompileError(f".gitignore cannot be matched: {e}") from e


def _ignored(rel: str, is_dir: bool, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    """Whether `rel` (relative to the root) is ignored by the .gitignore files above it."""
    for base, spec in specs:
        sub = rel[len(base) + 1 :] if base else rel
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


def _file_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class _Guard:
    """What one walk (or read) of `root` must never open or index: the policy's paths
    (`PathRules`), applied to where symlinks lead too, and the database's files, known by their
    resolved paths and their inodes (a link or a hard link with another name is still them)."""

    def __init__(self, root: Path, policy: AccessPolicy, path_rules: PathRules | None = None) -> None:
        self.root = root  # resolved
        self.policy = policy
        self.paths = path_rules or PathRules(policy)
        holder = policy.root_of(root)
        below = root.relative_to(holder).as_posix() if holder is not None else "."
        self.prefix = "" if below == "." else below  # the walked root, relative to its policy root
        self.db_names = {p.name for p in policy.db_files} | (
            {policy.db_dir.name} if policy.db_dir is not None else set()
        )  # a first test by name, before resolving (`AccessPolicy.may_be_private`, precomputed)
        self.db_ids: set[tuple[int, int]] = set()
        for db_file in (*policy.db_files, *((policy.db_dir,) if policy.db_dir is not None else ())):
            try:
                self.db_ids.add(_file_id(os.stat(db_file)))
            except OSError:
                pass  # not there (yet): its resolved path is still compared

    def full(self, rel: str) -> str:
        """`rel` (relative to the walked root) relative to the policy's root."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def is_db(self, st: os.stat_result) -> bool:
        """Whether the entry `st` (a file, or a folder below the root) is one of the database's
        files or its folder. The folder may be the walked root or lie above it: no entry is then."""
        return _file_id(st) in self.db_ids

    def is_db_path(self, resolved: Path) -> bool:
        """Whether `resolved` is one of the database's files, or lies in its folder where that
        folder is below the walked root."""
        if resolved in self.policy.db_files:
            return True
        db_dir = self.policy.db_dir
        return (
            db_dir is not None
            and db_dir != self.root
            and db_dir.is_relative_to(self.root)
            and resolved.is_relative_to(db_dir)
        )

    def link_refusal(self, link: Path) -> str | None:
        """Why the symlinked file `link` must not be read, judged by where it leads (resolved);
        None if it may (or it leads outside the root: `iter_sources` reports that)."""
        target = link.resolve()
        if self.is_db_path(target):
            return "a symlink to the cache database's files: never opened"
        if not target.is_relative_to(self.root):
            return None
        rel = target.relative_to(self.root)
        parts = tuple(Path(self.prefix).parts) + rel.parts if self.prefix else rel.parts
        if self.paths.refusal(parts, False) is not None:
            return "a symlink to a hidden or deny-listed path: left out"
        return None


@dataclass
class _Rules:
    """One walk's compiled rules."""

    root: Path  # resolved
    file_filter: FileFilter
    policy: AccessPolicy | None
    include: pathspec.GitIgnoreSpec | None
    exclude: pathspec.GitIgnoreSpec | None
    guard: _Guard | None

    def left_out(self, rel: str, name: str, is_dir: bool, specs: list) -> bool:
        """Whether the walk passes over `rel` (policy first: no request filter widens it)."""
        shown = rel + "/" if is_dir else rel
        if self.guard is not None:
            if not self.guard.policy.include_hidden and is_hidden(name):
                return True
            if self.guard.paths.denied(self.guard.full(rel), is_dir):
                return True
        if is_dir and name == ".git":
            return True
        if self.file_filter.respect_gitignore and _ignored(rel, is_dir, specs):
            return True
        if self.exclude is not None and self.exclude.match_file(shown):
            return True
        return not is_dir and self.include is not None and not self.include.match_file(rel)


def _rules(
    root: Path, file_filter: FileFilter, policy: AccessPolicy | None, path_rules: PathRules | None
) -> _Rules:
    check_filter(file_filter)
    resolved = root.resolve()
    return _Rules(
        resolved,
        file_filter,
        policy,
        compile_globs(file_filter.include) if file_filter.include else None,
        compile_globs(file_filter.exclude) if file_filter.exclude else None,
        _Guard(resolved, policy, path_rules) if policy is not None else None,
    )


def walk_files(
    root: Path,
    file_filter: FileFilter,
    policy: AccessPolicy | None = None,
    deadline: float | None = None,
    skipped: list[SkippedFile] | None = None,
    check: Callable[[], None] | None = None,
    path_rules: PathRules | None = None,
) -> Iterator[str]:
    """Relative paths of the files under `root` that pass `file_filter` and `policy`, sorted per
    directory. `deadline` (time.monotonic()) past: InvalidParameterError. Entries that cannot be
    walked (symlink loops, unreadable directories) and symlinks the policy refuses (by where they
    lead) go to `skipped` with their reason. `check()` runs before each directory (an index's
    cancel check: it raises to stop the walk). `path_rules`: the policy's, compiled (else now)."""
    rules = _rules(root, file_filter, policy, path_rules)
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
            if (
                file_filter.respect_gitignore
                and (spec := _gitignore_spec(directory, rules.guard)) is not None
            ):
                specs = [*specs, (rel_dir, spec)]
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: a .gitignore symlink loop
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
            elif rules.guard is not None and entry.is_symlink():
                if (why := rules.guard.link_refusal(Path(entry.path))) is not None:
                    notes.append(SkippedFile(rel, why))
                else:
                    yield rel
            else:
                yield rel


def _kind(entry: os.DirEntry, rules: _Rules) -> str | None:
    """ "dir", "file", "private" (the database's files, whatever their name, and its folder
    below the root), "other" (sockets, FIFOs, links to directories), or None when the entry
    cannot be read (a symlink loop: ELOOP)."""
    try:
        kind = "dir" if entry.is_dir(follow_symlinks=False) else "file" if entry.is_file() else "other"
        guard = rules.guard
        if kind != "other" and guard is not None:
            if guard.is_db(entry.stat()):  # by inode: a link or a hard link of another name
                return "private"
            if entry.name in guard.db_names and guard.policy.is_private(
                Path(entry.path).resolve(), rules.root
            ):
                return "private"
        return kind
    except (OSError, RuntimeError):  # ELOOP from stat; pathlib's resolve() raises RuntimeError on loops
        return None


def iter_sources(
    root: Path,
    rel_paths: Iterable[str],
    max_bytes: int,
    policy: AccessPolicy | None = None,
    path_rules: PathRules | None = None,
) -> Iterator[SourceFile | SkippedFile]:
    """Each file's bytes (one file in memory at a time), or why it cannot be read. With `policy`,
    its rules are checked again before each file is opened (a file swapped for a symlink since
    the walk): where a symlink leads, and the database's files by inode."""
    resolved_root = root.resolve()
    guard = _Guard(resolved_root, policy, path_rules) if policy is not None else None
    for rel in rel_paths:
        path = root / rel
        try:
            if path.is_symlink():
                if not path.resolve().is_relative_to(resolved_root):
                    yield SkippedFile(rel, "a symlink that leads outside the indexed directory")
                    continue
                if guard is not None and (why := guard.link_refusal(path)) is not None:
                    yield SkippedFile(rel, why)
                    continue
            st = path.stat()
            if guard is not None and guard.is_db(st):
                yield SkippedFile(rel, "the cache database's own file: never opened")
                continue
            if st.st_size > max_bytes:
                yield SkippedFile(rel, f"larger than the {max_bytes} byte limit ({st.st_size} bytes)")
                continue
            data = path.read_bytes()
        except (OSError, RuntimeError) as e:
            yield SkippedFile(rel, f"unreadable: {getattr(e, 'strerror', None) or e}")
            continue
        yield SourceFile(rel, data)
