"""Benchmark results kept in the registry: one summary per suite run (`kvspill bench progressive |
stability | compare | all`), read back by `kvspill bench history` and the manager's `GET /api/results`.

Invariants:
- A row is a run's summary (the figures a suite chose: its verdict and headline numbers), never its
  per-request rows: those stay in the run's folder, which `out_dir` names.
- `model` is the model as the run named it (a path, a hub id, a registry name or a URL): a suite
  runs models that were never registered, so results do not follow the models table's deletes.
- `figures` round-trips through JSON: a value JSON cannot hold (NaN, an object) is refused when
  recorded, with the key named, so history never shows what the run did not measure.
- Reads come newest first; `limit` bounds them (1..MAX_LIMIT). `to_json` adds the row's
  `headline` and `trend` (`result_text.py`), so `bench history --json` and `GET /api/results`
  carry the words and the figure the CLI and the dashboard show.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvspill.registry.result_text import headline, trend
from kvspill.registry.store import Registry, RegistryError

MAX_LIMIT = 1000
SUITES = ("progressive", "stability", "compare")


@dataclass(frozen=True)
class BenchResult:
    result_id: int
    model: str
    profile: str | None  # the registry profile the run used, if any
    host: str
    created_at: float  # Unix seconds
    suite: str
    passed: bool | None  # the suite's verdict (None: the suite does not judge, e.g. compare)
    figures: dict[str, Any]
    out_dir: str | None  # the run's results folder, as given

    def to_json(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "headline": headline(self.suite, self.figures),
            "trend": trend(self.suite, self.figures),
        }


def _check_figures(figures: dict[str, Any]) -> str:
    """The figures as JSON text; a value that JSON would not give back as it was is an error."""

    def check(value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise RegistryError(f"result figure {where} is {value}: store a finite number or None")
        if isinstance(value, dict):
            for k, v in value.items():
                check(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                check(v, f"{where}[{i}]")
        elif value is not None and not isinstance(value, str | int | float | bool):
            raise RegistryError(f"result figure {where} is a {type(value).__name__}: store numbers or text")

    for key, value in figures.items():
        check(value, key)
    return json.dumps(figures, sort_keys=True)


def record_result(
    registry: Registry,
    model: str,
    suite: str,
    figures: dict[str, Any],
    *,
    passed: bool | None = None,
    profile: str | None = None,
    out_dir: str | None = None,
    host: str | None = None,
) -> BenchResult:
    """Store one run's summary; returns it with its id."""
    if suite not in SUITES:
        raise RegistryError(f"unknown suite {suite!r}: results are kept for {', '.join(SUITES)}")
    if not model:
        raise RegistryError("a result needs the model it measured")
    text = _check_figures(figures)
    host = host or platform.node()
    created = time.time()
    cursor = registry.db.execute(
        "INSERT INTO results (model, profile, host, created_at, suite, passed, figures_json, out_dir) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (model, profile, host, created, suite, None if passed is None else int(passed), text, out_dir),
    )
    result_id = int(cursor.lastrowid or 0)
    return BenchResult(result_id, model, profile, host, created, suite, passed, json.loads(text), out_dir)


def list_results(
    registry: Registry, model: str | Sequence[str] | None = None, suite: str | None = None, limit: int = 50
) -> list[BenchResult]:
    """Stored results, newest first, of one model (or any of several names: a registry name and its
    source, which `--model NAME` runs record) and/or one suite when given."""
    if not 1 <= limit <= MAX_LIMIT:
        raise RegistryError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if suite is not None and suite not in SUITES:
        raise RegistryError(f"unknown suite {suite!r}: choose from {', '.join(SUITES)}")
    where: list[str] = []
    args: list[Any] = []
    if model is not None:
        names = [model] if isinstance(model, str) else list(model)
        if not names:
            return []
        where.append(f"model IN ({', '.join('?' * len(names))})")
        args += names
    if suite is not None:
        where.append("suite = ?")
        args.append(suite)
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    rows = registry.db.execute(
        f"SELECT * FROM results {clause}ORDER BY created_at DESC, id DESC LIMIT ?", (*args, limit)
    )
    return [_result(r) for r in rows]


def result_models(registry: Registry) -> list[dict[str, Any]]:
    """Every model with kept results (as the runs named it), with how many and the newest's date."""
    rows = registry.db.execute(
        "SELECT model, COUNT(*) AS count, MAX(created_at) AS last FROM results GROUP BY model ORDER BY last DESC"
    )
    return [{"model": r["model"], "count": r["count"], "last": r["last"]} for r in rows]


def _result(row: Any) -> BenchResult:
    passed = None if row["passed"] is None else bool(row["passed"])
    return BenchResult(
        row["id"],
        row["model"],
        row["profile"],
        row["host"],
        row["created_at"],
        row["suite"],
        passed,
        json.loads(row["figures_json"]),
        row["out_dir"],
    )
