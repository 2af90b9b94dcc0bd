"""The results folder of a suite: JSON lines, CSV, a markdown report (plots: `plots.py`).

Invariants:
- `write_rows(out_dir, stem, rows)` writes `<stem>.jsonl` (one JSON object per row, keys as given)
  and `<stem>.csv` (the union of the rows' keys in first-seen order; a missing value is empty).
- Files are overwritten, never appended: one folder holds one run.
- `run_header()` is what every row of a run shares (system, date, host), as the peer benchmark's
  JSON has it (`shared/bench/README.md`).
"""

from __future__ import annotations

import csv
import datetime
import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_header(suite: str) -> dict[str, Any]:
    from kvspill import __version__

    return {
        "suite": suite,
        "system": f"kvspill-{__version__}",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
    }


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def write_rows(out_dir: Path, stem: str, rows: Sequence[dict[str, Any]]) -> list[Path]:
    """`<stem>.jsonl` and `<stem>.csv` under `out_dir`; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl, csv_path = out_dir / f"{stem}.jsonl", out_dir / f"{stem}.csv"
    with jsonl.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    names = columns(rows)
    with csv_path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in names})
    return [jsonl, csv_path]


def fmt(value: Any) -> str:
    """A table cell: '-' for nothing, 4 significant digits for floats."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "/").replace("\n", " ")


def markdown_table(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """A markdown table of `keys` (columns missing from every row are left out)."""
    keys = [k for k in keys if any(k in r for r in rows)]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in rows]
    return lines


def grid_table(row_label: str, contexts: Sequence[int], table: dict[str, dict[int, Any]]) -> list[str]:
    """Rows = configurations, columns = contexts (for `compare`)."""
    lines = [
        "| " + " | ".join([row_label, *(str(c) for c in contexts)]) + " |",
        "|" + "---|" * (len(contexts) + 1),
    ]
    for name, values in table.items():
        lines.append("| " + " | ".join([name, *(fmt(values.get(c)) for c in contexts)]) + " |")
    return lines


def write_report(out_dir: Path, title: str, sections: Sequence[tuple[str, Sequence[str]]]) -> Path:
    """`report.md`: a title, then (heading, lines) sections."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    for heading, body in sections:
        lines += [f"## {heading}", "", *body, ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def setup_lines(header: dict[str, Any], infos: dict[str, dict[str, Any]], command: str | None) -> list[str]:
    """The run's where and what: system, date, host, each target's model/device/card or URL, the command."""
    lines = [f"- {k}: {header[k]}" for k in ("system", "date", "host") if k in header]
    for label, info in infos.items():
        lines.append(f"- {label}: " + ", ".join(f"{k} {fmt(v)}" for k, v in info.items()))
    if command:
        lines += ["", "```", command, "```"]
    return lines
