"""PNG plots of the suites' rows, through matplotlib's Agg backend (no display needed).

Invariants:
- matplotlib is imported inside each function, with the Agg backend chosen first: importing
  this module costs nothing, and plotting never needs a display.
- A panel with no value to draw (say, VRAM on a CPU run) says so in its title instead of being
  left out, so every plot has the same layout.
- Failed rows are not drawn (their metrics are empty); the reports' tables list them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

CONTEXT_PANELS = (
    ("ttft_s", "TTFT (s)"),
    ("decode_tok_s", "decode tok/s"),
    ("peak_gpu_gib", "peak VRAM (GiB)"),
    ("host_rss_gib", "host RSS (GiB)"),
    ("bytes_moved", "KV bytes moved between tiers"),
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain_axis(ax: Any) -> None:
    """Values as they are: no offset notation (+1.234e3 over ticks made 0.6 MiB of RSS look steep)
    and, for a flat series, a y range that shows it is flat."""
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    low, high = ax.get_ylim()
    if high - low < 1e-3 * max(abs(high), 1e-9):
        ax.set_ylim(low - abs(low) * 0.05 - 1e-9, high + abs(high) * 0.05 + 1e-9)


def _not_measured(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    """An empty panel says why it is empty, in its middle."""
    on_cpu = any(str(r.get("device", "")).startswith("cpu") or r.get("card") == "cpu" for r in rows)
    ax.text(
        0.5,
        0.5,
        "not measured on the CPU" if on_cpu else "not measured",
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="gray",
    )
    ax.set_yticks([])


def _series(rows: Sequence[dict[str, Any]], series_key: str | None) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get(series_key, "")) if series_key else "", []).append(row)
    return groups


def plot_by_context(
    path: Path,
    rows: Sequence[dict[str, Any]],
    title: str,
    series_key: str | None = None,
    panels: Sequence[tuple[str, str]] = CONTEXT_PANELS,
) -> Path:
    """One panel per metric against the context (log2 axis); one line per `series_key` value."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, (len(panels) + 1) // 2, figsize=(14, 7), squeeze=False)
    groups = _series(rows, series_key)
    for ax, (key, label) in zip(axes.flat, panels, strict=False):
        drawn = False
        for name, group in groups.items():
            points = [(r["ctx"], r[key]) for r in group if r.get("ok") and r.get(key) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=name or None)
                drawn = True
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        ax.set_title(label if drawn else f"{label}: not measured")
        if drawn:
            _plain_axis(ax)
        else:
            _not_measured(ax, rows)
        ax.grid(True, alpha=0.3)
        if drawn and series_key:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_stability(path: Path, samples: Sequence[dict[str, Any]], title: str) -> Path:
    """Host RSS, GPU memory and wave tok/s against time; waves with errors marked in red."""
    plt = _pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    panels = (
        ("host_rss_gib", "host RSS (GiB)"),
        ("gpu_gib", "VRAM allocated (GiB)"),
        ("tok_s", "output tok/s"),
    )
    for ax, (key, label) in zip(axes, panels, strict=True):
        points = [(s["t_s"], s[key]) for s in samples if s.get(key) is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker=".")
            bad = [(s["t_s"], s[key]) for s in samples if s.get("errors") and s.get(key) is not None]
            if bad:
                bx, by = zip(*bad, strict=True)
                ax.scatter(bx, by, color="red", zorder=3, label="wave with errors")
                ax.legend(fontsize=8)
        ax.set_ylabel(label)
        ax.set_title(label if points else f"{label}: not measured", fontsize=9)
        if points:
            _plain_axis(ax)
        else:
            _not_measured(ax, samples)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
