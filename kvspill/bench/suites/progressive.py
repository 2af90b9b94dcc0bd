"""`bench progressive`: raise the context on one target until it fails; the largest stable context.

For each context, ascending, one request alone: a prompt of `ctx` tokens and `new_tokens`
outputs, measured by `targets.measure` (TTFT, decode tok/s, peak VRAM, host RSS, KV bytes moved).

Invariants:
- Contexts run in the order given (ascending, checked by `configs.parse_contexts`); the first
  failed row ends the sweep: the contexts after it get no row, since a larger one would only
  fail the same way (and an engine after an out-of-memory is not worth trusting).
- `largest_stable_ctx` is the last context whose row is ok; None when the first already failed,
  which is the one outcome the command exits non-zero for.
- One optional warm-up request (not a row) runs first, so the first row is not the one that pays
  for lazy initialisation (kernels, allocator growth).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvspill.bench.suites.targets import RequestSpec, Target, measure, warm_up


@dataclass
class ProgressiveResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    largest_stable_ctx: int | None = None
    failed_ctx: int | None = None  # the context that failed (None: all passed)
    failure: str | None = None

    @property
    def passed(self) -> bool:
        """At least the smallest context ran."""
        return self.largest_stable_ctx is not None


def run_progressive(
    target: Target,
    contexts: list[int],
    new_tokens: int,
    seed: int = 0,
    warmup: bool = True,
    advance: Callable[[float], None] | None = None,
    base_row: dict[str, Any] | None = None,
) -> ProgressiveResult:
    """Sweep `contexts` on `target`; `advance(1)` after each context, `base_row` merged into each row."""
    result = ProgressiveResult()
    if warmup:
        warm_up(target)
    for i, ctx in enumerate(contexts):
        row = {**(base_row or {}), **measure(target, RequestSpec(ctx, new_tokens, seed=seed + ctx))}
        result.rows.append(row)
        if advance is not None:
            advance(1)
        if not row["ok"]:
            result.failed_ctx, result.failure = ctx, row["err"]
            if advance is not None:
                advance(len(contexts) - i - 1)  # the skipped contexts: the bar ends full
            break
        result.largest_stable_ctx = ctx
    return result


def summary_lines(result: ProgressiveResult, contexts: list[int]) -> list[str]:
    """The verdict the report and the command print."""
    if result.largest_stable_ctx is None:
        return [f"FAILED at the first context ({contexts[0]} tokens): {result.failure}"]
    lines = [f"largest stable context: {result.largest_stable_ctx} tokens"]
    if result.failed_ctx is not None:
        lines.append(f"first failure at {result.failed_ctx} tokens: {result.failure}")
    else:
        lines.append(f"every context up to {contexts[-1]} tokens ran")
    return lines


def figures(result: ProgressiveResult, contexts: list[int]) -> dict[str, Any]:
    """The run's summary as the registry keeps it (`registry/results.py`)."""
    ok = [r for r in result.rows if r.get("ok")]
    peaks = [r["peak_gpu_gib"] for r in ok if r.get("peak_gpu_gib") is not None]
    return {
        "contexts": contexts,
        "largest_stable_ctx": result.largest_stable_ctx,
        "failed_ctx": result.failed_ctx,
        "failure": result.failure[:300] if result.failure else None,
        "decode_tok_s": {str(r["ctx"]): r.get("decode_tok_s") for r in ok},
        "ttft_s": {str(r["ctx"]): r.get("ttft_s") for r in ok},
        "peak_gpu_gib": max(peaks) if peaks else None,
    }


ROW_KEYS = (
    "ctx",
    "ok",
    "ttft_s",
    "decode_tok_s",
    "new_tokens",
    "peak_gpu_gib",
    "host_rss_gib",
    "bytes_moved",
    "err",
)


def write_results(
    out_dir: Path,
    result: ProgressiveResult,
    contexts: list[int],
    info: dict[str, Any],
    command: str | None = None,
) -> list[Path]:
    """results.jsonl, results.csv, progressive.png and report.md under `out_dir`."""
    from kvspill.bench.suites import plots, report

    header = {
        k: v for k, v in (result.rows[0] if result.rows else {}).items() if k in ("system", "date", "host")
    }
    paths = report.write_rows(out_dir, "results", result.rows)
    title = f"progressive: {info.get('model') or info.get('url')}"
    paths.append(plots.plot_by_context(out_dir / "progressive.png", result.rows, title))
    sections = [
        ("Verdict", summary_lines(result, contexts)),
        ("Results", report.markdown_table(result.rows, ROW_KEYS)),
        ("Plot", ["![progressive](progressive.png)"]),
        ("Setup", report.setup_lines(header, {"target": info}, command)),
        (
            "Method",
            [
                "One request alone per context, ascending; the sweep stops at the first failure.",
                "TTFT from adding the request to its first token; decode tok/s = tokens after the first over "
                "the first-to-last-token time; peak VRAM = torch's peak allocation (in process; a URL's is "
                "the largest value polled from /metrics); host RSS after the request; bytes moved = KV bytes "
                "between tiers during the request.",
            ],
        ),
    ]
    paths.append(report.write_report(out_dir, "kvspill bench progressive", sections))
    return paths
