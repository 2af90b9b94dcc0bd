"""A suite run's summary kept in the registry's SQLite (`registry/results.py`), and shown back.

Every suite command stores its `figures` (the suite's own `figures()`) once its folder is written,
unless `--no-keep`; `kvspill bench history` lists them; the manager serves them at `GET /api/results`.

Invariants:
- Failing to store is one warning line, never a failed run: the results folder, already written,
  is the run's record, and a locked or damaged registry must not turn a passing run into exit 1.
- How a kept summary reads (`bench history`, the dashboard) is `registry/result_text.py`'s.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from kvspill.errors import KvspillError


def model_of(info: dict[str, Any]) -> str:
    """The model a target's `info()` names (a server's URL when it names none)."""
    return str(info.get("model") or info.get("url") or "unknown")


def keep(
    suite: str,
    model: str,
    figures: dict[str, Any],
    passed: bool | None,
    out_dir: Path,
    data_dir: Path | None,
    profile: str | None = None,
) -> str:
    """Store the summary; the line saying where (or why it was not stored)."""
    from kvspill.registry.results import record_result
    from kvspill.registry.store import open_registry

    try:
        registry = open_registry(data_dir)
        try:
            stored = record_result(
                registry,
                model,
                suite,
                figures,
                passed=passed,
                profile=profile,
                out_dir=str(out_dir.resolve()),
            )
        finally:
            registry.close()
    except (KvspillError, sqlite3.Error) as e:  # sqlite3: locked past the busy timeout, damaged
        return f"warning: the {suite} summary was not kept in the registry ({e}); the results folder has it"
    return f"kept as result {stored.result_id} in {registry.path} (kvspill bench history)"
