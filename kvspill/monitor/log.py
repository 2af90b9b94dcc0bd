"""Snapshot logs: CSV (one flat row per refresh) or JSON lines (one `Snapshot.to_dict()` per line).

Invariants:
- The format follows `--log-format`, else the file suffix (`.csv` -> csv, anything else -> jsonl).
- One line or row per refresh, flushed at once, so `tail -f` and a crash both see every refresh.
- The CSV header is the first snapshot's columns; later rows fill missing columns with empty
  cells and drop new ones (a GPU or server appearing mid-session goes to JSON lines only).
- JSON lines also carry the refresh's alerts.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from kvspill.monitor.alerts import Alert
from kvspill.monitor.snapshot import Snapshot

LOG_FORMATS = ("auto", "csv", "jsonl")


def resolve_format(path: Path, log_format: str = "auto") -> str:
    if log_format not in LOG_FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    if log_format != "auto":
        return log_format
    return "csv" if path.suffix.lower() == ".csv" else "jsonl"


class SnapshotLogger:
    def __init__(self, path: Path, log_format: str = "auto") -> None:
        self.path = path
        self.format = resolve_format(path, log_format)
        self._file: IO[str] = path.open("a" if self.format == "jsonl" else "w", newline="", encoding="utf-8")
        self._writer: csv.DictWriter[str] | None = None

    def write(self, snapshot: Snapshot, alerts: list[Alert] | None = None) -> None:
        if self.format == "jsonl":
            record: dict[str, Any] = snapshot.to_dict()
            record["alerts"] = [asdict(a) for a in alerts or []]
            self._file.write(json.dumps(record) + "\n")
        else:
            row = snapshot.flat_row()
            row["num_alerts"] = len(alerts or [])
            if self._writer is None:
                self._writer = csv.DictWriter(
                    self._file, fieldnames=list(row), restval="", extrasaction="ignore"
                )
                self._writer.writeheader()
            self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()
