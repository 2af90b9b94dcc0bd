"""A suite run's summary kept in the registry's SQLite (`registry/results.py`), and shown back.

Every suite command stores its `figures` (the suite's own `figures()`) once its folder is written,
unless `--no-keep`; `kvspill bench history` lists them; the manager serves them at `GET /api/results`.

Invariants:
- Failing to store is one warning line, never a failed run: the results folder, already written,
  is the run's record, and a locked or damaged registry must not turn a passing run into exit 1.
- `headline` is one line of the figures a suite chose, for `bench history` (the folder has the rest).
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


def _fmt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def headline(suite: str, figures: dict[str, Any]) -> str:
    """The figures that matter most of one stored run, in one line."""
    if suite == "progressive":
        rates = figures.get("decode_tok_s") or {}
        last = list(rates.items())[-1] if rates else None
        line = f"largest stable {_fmt(figures.get('largest_stable_ctx'))} tok"
        if last is not None:
            line += f", decode {_fmt(last[1])} tok/s at {last[0]}"
        if figures.get("failed_ctx") is not None:
            line += f", failed at {figures['failed_ctx']}"
        return line
    if suite == "stability":
        return (
            f"{figures.get('requests')} requests, {figures.get('errors')} errors, "
            f"RSS {_fmt(figures.get('rss_growth_gib'), ' GiB')}, {_fmt(figures.get('tok_s_mean'))} tok/s"
        )
    parts = []
    for label, row in (figures.get("configs") or {}).items():
        if row.get("error"):
            parts.append(f"{label}: failed")
        else:
            parts.append(
                f"{label}: load {_fmt(row.get('load_s'), ' s')}, {_fmt(row.get('decode_tok_s'))} tok/s, "
                f"TTFT {_fmt(row.get('ttft_s'), ' s')}, total {_fmt(row.get('total_s'), ' s')}"
            )
    return "; ".join(parts) or "-"
