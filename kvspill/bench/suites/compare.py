"""`bench compare`: the same contexts under several configurations, one after another.

A configuration is a label and a factory that builds its target: an engine with a named set of
options (`configs.config_options`) or a server at a URL. Each is built only when its turn comes,
run over every context (one request alone per context, `targets.measure`) and closed before the
next is built, so two engines never hold memory at once. An `IsolatedEngine` runs in its own child
process (the CLI's choice on CUDA, where device memory is only reliably returned at process exit).

Invariants:
- Rows: one per (configuration, context), in that order, always: a configuration that fails to
  build gets a failed row per context with the build error; after a failed context the larger
  ones of that configuration are not run (`err` says which context failed) but keep their row.
- `advance(1)` once per row.
- Per configuration (`config_summary`): `load_s` (building its engine; None for a server),
  `total_s` (load, warm-up and every row), and the means of its ok rows' decode tok/s, TTFT
  and end-to-end latency: seed 001's A/B offload table (weights-resident vs weights-offload).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvspill.bench.suites.progressive import run_progressive
from kvspill.bench.suites.targets import Target

TargetFactory = Callable[[], Target]


@dataclass
class CompareResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    infos: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # label -> target.info() or the build error


def _failed_row(label: str, ctx: int, err: str, base_row: dict[str, Any]) -> dict[str, Any]:
    return {**base_row, "config": label, "ctx": ctx, "new_tokens": 0, "ok": False, "err": err}


def _run_one(
    label: str,
    target: Target,
    contexts: list[int],
    new_tokens: int,
    seed: int,
    warmup: bool,
    base_row: dict[str, Any],
    advance: Callable[[float], None] | None,
) -> list[dict[str, Any]]:
    """The progressive sweep on this configuration, plus a `not run` row per context it skipped."""
    sweep = run_progressive(
        target, contexts, new_tokens, seed, warmup, advance, {**base_row, "config": label}
    )
    skipped = contexts[len(sweep.rows) :]
    return sweep.rows + [
        _failed_row(label, ctx, f"not run: context {sweep.failed_ctx} failed", base_row) for ctx in skipped
    ]


@dataclass(frozen=True)
class IsolatedEngine:
    """A configuration run in a fresh child process (spawn): on CUDA a third engine built in one
    process found ~9 GiB of device memory still in use (W2, H200), whatever the order of the
    presets; a child per configuration hands everything back to the driver when it exits."""

    config: Any  # EngineConfig (picklable)


def _error_result(
    label: str, contexts: list[int], what: str, e: Exception, base_row: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    # The whole message (one line): a plan error's first line only says "does not fit".
    err = f"{what}: {type(e).__name__}: {' '.join(str(e).split())}"
    return {"error": err}, [_failed_row(label, ctx, err, base_row) for ctx in contexts]


def _run_config(
    label: str,
    factory: TargetFactory,
    contexts: list[int],
    new_tokens: int,
    seed: int,
    warmup: bool,
    base_row: dict[str, Any],
    advance: Callable[[float], None] | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(info or the build error, rows) of one configuration; its target is closed before returning.
    `total_s` in the info is the configuration's wall time: its load (`load_s`), warm-up and rows."""
    started = time.perf_counter()
    try:
        target = factory()
    except Exception as e:  # noqa: BLE001 - a configuration that cannot start is a result, not a crash
        info, rows = _error_result(label, contexts, "did not start", e, base_row)
        if advance is not None:
            advance(len(rows))
        return info, rows
    try:
        info = target.info()
        rows = _run_one(label, target, contexts, new_tokens, seed, warmup, base_row, advance)
        return {**info, "total_s": round(time.perf_counter() - started, 3)}, rows
    finally:
        target.close()


def _run_isolated_child(
    label: str,
    config: Any,
    contexts: list[int],
    new_tokens: int,
    seed: int,
    warmup: bool,
    base_row: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from kvspill.bench.suites.targets import EngineTarget

    return _run_config(
        label,
        lambda: EngineTarget.build(config, label=label),
        contexts,
        new_tokens,
        seed,
        warmup,
        base_row,
        None,
    )


def _run_isolated(
    label: str,
    spec: IsolatedEngine,
    contexts: list[int],
    new_tokens: int,
    seed: int,
    warmup: bool,
    base_row: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(
                _run_isolated_child, label, spec.config, contexts, new_tokens, seed, warmup, base_row
            ).result()
        except Exception as e:  # noqa: BLE001 - a child that dies (killed, crashed) is this configuration's result
            return _error_result(label, contexts, "child process failed", e, base_row)


def run_compare(
    configs: list[tuple[str, TargetFactory | IsolatedEngine]],
    contexts: list[int],
    new_tokens: int,
    seed: int = 0,
    warmup: bool = True,
    advance: Callable[[float], None] | None = None,
    base_row: dict[str, Any] | None = None,
) -> CompareResult:
    """Every configuration over every context; the same prompts (seed + ctx) for all of them."""
    result = CompareResult()
    base = base_row or {}
    for label, factory in configs:
        if isinstance(factory, IsolatedEngine):
            info, rows = _run_isolated(label, factory, contexts, new_tokens, seed, warmup, base)
            if advance is not None:
                advance(len(rows))
        else:
            info, rows = _run_config(label, factory, contexts, new_tokens, seed, warmup, base, advance)
        result.infos[label] = info
        result.rows += rows
    return result


def pivot(rows: list[dict[str, Any]], metric: str) -> tuple[list[int], dict[str, dict[int, Any]]]:
    """(contexts, {config: {ctx: value}}) for a table of `metric`, failed rows as `err`-less '-'."""
    contexts = sorted({int(r["ctx"]) for r in rows})
    table: dict[str, dict[int, Any]] = {}
    for r in rows:
        table.setdefault(str(r["config"]), {})[int(r["ctx"])] = r.get(metric) if r["ok"] else None
    return contexts, table


def _mean(values: list[Any]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return round(sum(present) / len(present), 4) if present else None


def config_summary(result: CompareResult) -> list[dict[str, Any]]:
    """One row per configuration: load time, throughput, latency and total (see the module doc)."""
    out = []
    for label, info in result.infos.items():
        rows = [r for r in result.rows if r.get("config") == label]
        ok = [r for r in rows if r.get("ok")]
        out.append(
            {
                "config": label,
                "ok_rows": f"{len(ok)}/{len(rows)}",
                "load_s": info.get("load_s"),
                "decode_tok_s": _mean([r.get("decode_tok_s") for r in ok]),
                "ttft_s": _mean([r.get("ttft_s") for r in ok]),
                "e2e_s": _mean([r.get("e2e_s") for r in ok]),
                "total_s": info.get("total_s"),
                "error": info.get("error"),
            }
        )
    return out


def figures(result: CompareResult, contexts: list[int]) -> dict[str, Any]:
    """The run's summary as the registry keeps it (`registry/results.py`): the per-configuration table."""
    return {
        "contexts": contexts,
        "configs": {
            row["config"]: {k: v for k, v in row.items() if k != "config"} for row in config_summary(result)
        },
    }


SUMMARY_KEYS = ("config", "ok_rows", "load_s", "decode_tok_s", "ttft_s", "e2e_s", "total_s", "error")

ROW_KEYS = (
    "config",
    "ctx",
    "ok",
    "ttft_s",
    "decode_tok_s",
    "e2e_s",
    "peak_gpu_gib",
    "host_rss_gib",
    "bytes_moved",
    "err",
)


# Configurations whose point is KV in a cold tier: a row of theirs that moved no KV bytes
# between tiers measured the same thing as `offload-off`.
COLD_TIER_CONFIGS = ("offload-on", "stream", "cold-cpu")


def unexercised_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """One warning per cold-tier configuration with contexts where it moved 0 KV bytes."""
    warnings = []
    for label in COLD_TIER_CONFIGS:
        idle = [
            r["ctx"] for r in rows if r.get("config") == label and r.get("ok") and r.get("bytes_moved") == 0
        ]
        if idle:
            contexts = ", ".join(str(c) for c in idle)
            warnings.append(
                f"WARNING: {label} moved 0 KV bytes between tiers at context {contexts}: the KV fit the "
                "device pool, so this arm did not exercise its cold tier there (raise --contexts or "
                "lower --vram-budget)"
            )
    return warnings


def write_results(
    out_dir: Path,
    result: CompareResult,
    header: dict[str, Any],
    descriptions: dict[str, str],
    notes: list[str],
    command: str | None = None,
) -> list[Path]:
    """results.jsonl, results.csv, compare.png (one line per configuration) and report.md."""
    from kvspill.bench.suites import plots, report

    notes = notes + unexercised_warnings(result.rows)
    paths = report.write_rows(out_dir, "results", result.rows)
    paths.append(plots.plot_by_context(out_dir / "compare.png", result.rows, "compare", series_key="config"))
    contexts, decode = pivot(result.rows, "decode_tok_s")
    _, ttft = pivot(result.rows, "ttft_s")
    configs = [
        f"- {label}: {descriptions.get(label, '')} {info}".rstrip() for label, info in result.infos.items()
    ]
    sections = [
        (
            "Per configuration: load time, throughput (mean decode tok/s), latency (mean TTFT and "
            "end-to-end s), total s",
            report.markdown_table(config_summary(result), SUMMARY_KEYS),
        ),
        ("Decode tok/s (configuration x context)", report.grid_table("config", contexts, decode)),
        ("TTFT s (configuration x context)", report.grid_table("config", contexts, ttft)),
        ("All rows", report.markdown_table(result.rows, ROW_KEYS)),
        ("Plot", ["![compare](compare.png)"]),
        ("Configurations", configs + [f"- note: {n}" for n in notes]),
        ("Setup", report.setup_lines(header, {}, command)),
    ]
    paths.append(report.write_report(out_dir, "kvspill bench compare", sections))
    return paths
