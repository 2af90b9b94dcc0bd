"""`bench all`: progressive, stability and compare in one run, one folder, one report.

The folder holds each suite's own folder (`progressive/`, `stability/`, `compare/`: rows, plots and
report as its command writes them) and, at the top, `report.md`: every verdict, the headline tables
and the three plots.

Invariants:
- The suites run in that order. Progressive and stability share one target, closed before compare
  builds its configurations one at a time, so two engines never hold memory at once.
- A suite that fails does not stop the next: the report shows every verdict. The run passes when
  progressive ran its smallest context and stability passed; compare's rows are results.
- compare's contexts, unless given, are those progressive ran ok (known only after it): compare's
  configurations are built for them by `compare_factories`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvspill.bench.suites import compare, progressive, stability
from kvspill.bench.suites.targets import Target

Advance = Callable[[float], None]
Bar = Callable[[str, float], AbstractContextManager[Advance]]
Factories = tuple[list[tuple[str, Any]], dict[str, str]]  # (label, factory), descriptions


@dataclass
class FullPlan:
    contexts: list[int]  # progressive's
    new_tokens: int
    stability: stability.StabilityConfig
    compare_contexts: list[int] | None  # None: those progressive ran ok
    seed: int = 0
    warmup: bool = True


@dataclass
class FullRun:
    plan: FullPlan
    info: dict[str, Any]  # the shared target's
    progressive: progressive.ProgressiveResult
    stability: stability.StabilityResult
    compare: compare.CompareResult
    compare_contexts: list[int]
    descriptions: dict[str, str]

    @property
    def passed(self) -> bool:
        return self.progressive.passed and self.stability.passed


def ok_contexts(result: progressive.ProgressiveResult, contexts: list[int]) -> list[int]:
    """The contexts progressive ran ok; the smallest alone when none did (compare still runs it)."""
    ok = [int(r["ctx"]) for r in result.rows if r.get("ok")]
    return ok or contexts[:1]


def run_full(
    target: Target,
    plan: FullPlan,
    compare_factories: Callable[[list[int]], Factories],
    bar: Bar,
    base_row: dict[str, Any],
) -> FullRun:
    """The three suites; `target` is closed after stability (before compare builds anything)."""
    try:
        info = target.info()
        with bar("1/3 progressive", len(plan.contexts)) as advance:
            prog = progressive.run_progressive(
                target,
                plan.contexts,
                plan.new_tokens,
                plan.seed,
                plan.warmup,
                advance,
                {**base_row, "suite": "progressive", "mode": target.label},
            )
        with bar("2/3 stability", plan.stability.duration_s) as advance:
            stab = stability.run_stability(target, plan.stability, advance=advance, warmup=False)
    finally:
        target.close()
    contexts = plan.compare_contexts or ok_contexts(prog, plan.contexts)
    factories, descriptions = compare_factories(contexts)
    with bar("3/3 compare", len(factories) * len(contexts)) as advance:
        comp = compare.run_compare(
            factories,
            contexts,
            plan.new_tokens,
            plan.seed,
            plan.warmup,
            advance,
            {**base_row, "suite": "compare"},
        )
    return FullRun(plan, info, prog, stab, comp, contexts, descriptions)


def figures(run: FullRun) -> dict[str, dict[str, Any]]:
    """Each suite's summary as the registry keeps it, by suite."""
    return {
        "progressive": progressive.figures(run.progressive, run.plan.contexts),
        "stability": stability.figures(run.stability, run.plan.stability),
        "compare": compare.figures(run.compare, run.compare_contexts),
    }


def _bullets(lines: list[str]) -> list[str]:
    return [f"- {line}" for line in lines]


def _verdict(run: FullRun) -> list[str]:
    word = "PASS" if run.passed else "FAIL"
    prog = progressive.summary_lines(run.progressive, run.plan.contexts)[0]
    stab = stability.summary_lines(run.stability)[0]
    return [
        f"**{word}** (progressive ran its smallest context, and stability passed)",
        "",
        f"- progressive: {prog}",
        f"- stability: {stab}",
        f"- compare: {len(run.compare.infos)} configurations x {len(run.compare_contexts)} contexts",
    ]


def write_full(out_dir: Path, run: FullRun, header: dict[str, Any], command: str | None = None) -> list[Path]:
    """Each suite's folder under `out_dir`, then the one report (`out_dir/report.md`)."""
    from kvspill.bench.suites import report

    paths = progressive.write_results(
        out_dir / "progressive", run.progressive, run.plan.contexts, run.info, command
    )
    stab_header, comp_header = {**header, "suite": "stability"}, {**header, "suite": "compare"}
    paths += stability.write_results(
        out_dir / "stability", run.stability, run.plan.stability, stab_header, run.info, command
    )
    paths += compare.write_results(
        out_dir / "compare", run.compare, comp_header, run.descriptions, [], command
    )
    cfg = run.plan.stability
    _, decode = compare.pivot(run.compare.rows, "decode_tok_s")
    sections = [
        ("Verdict", _verdict(run)),
        (
            "Progressive: one request alone per context, ascending, until one fails",
            _bullets(progressive.summary_lines(run.progressive, run.plan.contexts))
            + [""]
            + report.markdown_table(
                run.progressive.rows, ("ctx", "ok", "ttft_s", "decode_tok_s", "e2e_s", "peak_gpu_gib", "err")
            )
            + ["", "![progressive](progressive/progressive.png)"],
        ),
        (
            f"Stability: {cfg.duration_s:g} s of waves of {cfg.concurrency} requests, contexts "
            f"{cfg.min_ctx}..{cfg.max_ctx}",
            _bullets(stability.summary_lines(run.stability)) + ["", "![stability](stability/stability.png)"],
        ),
        (
            "Compare: load time, throughput (mean decode tok/s), latency (mean TTFT, end-to-end s), total s",
            report.markdown_table(compare.config_summary(run.compare), compare.SUMMARY_KEYS)
            + ["", "Decode tok/s (configuration x context):", ""]
            + report.grid_table("config", run.compare_contexts, decode)
            + compare.unexercised_warnings(run.compare.rows)
            + ["", "![compare](compare/compare.png)"],
        ),
        ("Setup", report.setup_lines(header, {"target": run.info}, command)),
        (
            "Files",
            ["Each suite's folder (progressive/, stability/, compare/) has its rows and its own report.md."],
        ),
    ]
    paths.append(report.write_report(out_dir, "kvspill bench all", sections))
    return paths
