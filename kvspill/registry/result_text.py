"""A kept suite result in words and one trend figure: what `kvspill bench history` prints and the
dashboard's Results table and trend plot show, from the same functions.

Invariants:
- Torch-free and imports nothing of kvspill: the registry (`BenchResult.to_json`), the CLI and the
  manager all read a result through these two functions, so the page never re-derives a figure.
- `headline` is one line of the figures a suite chose (the run's folder has the rest).
- `trend` is the suite's numeric headline per series (e.g. `{"decode tok/s": 41.2}`): only finite
  numbers, so a plot over runs never draws what a run did not measure.
"""

from __future__ import annotations

import math
from typing import Any


def _fmt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def _at_largest_context(rates: dict[str, Any]) -> tuple[str, Any] | None:
    """(context, value) of the largest context: the registry keeps figures with sorted keys, so
    {"512": .., "1024": ..} comes back as "1024", "512" and the last key is not the largest."""

    def size(ctx: str) -> float:
        try:
            return float(ctx)
        except ValueError:  # not a context count: before any number
            return -math.inf

    return max(rates.items(), key=lambda item: size(item[0])) if rates else None


def headline(suite: str, figures: dict[str, Any]) -> str:
    """The figures that matter most of one stored run, in one line."""
    if suite == "progressive":
        last = _at_largest_context(figures.get("decode_tok_s") or {})
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


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def trend(suite: str, figures: dict[str, Any]) -> dict[str, float]:
    """The headline figure of a run to plot over runs, per series; {} when it measured none.

    progressive: decode tok/s at its largest stable context (the rate its headline shows);
    stability: mean tok/s; compare: decode tok/s per configuration."""
    if suite == "progressive":
        last = _at_largest_context(figures.get("decode_tok_s") or {})
        series = {"decode tok/s": _number(last[1]) if last else None}
    elif suite == "stability":
        series = {"mean tok/s": _number(figures.get("tok_s_mean"))}
    else:
        configs = figures.get("configs") or {}
        series = {f"{label} decode tok/s": _number(row.get("decode_tok_s")) for label, row in configs.items()}
    return {label: value for label, value in series.items() if value is not None}
