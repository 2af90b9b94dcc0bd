"""`bench stability`: a mixed load for a duration; pass only with zero errors and flat memory.

The load runs in waves: each wave puts `concurrency` requests in flight at once (prompt lengths
drawn uniformly from [min_ctx, max_ctx], `new_tokens` outputs each), waits for all of them, and
then takes one sample: host RSS, GPU memory allocated, the wave's output tok/s and errors. Waves
repeat until `duration_s` has passed.

The trend test (documented in the report): over the second half of the samples (the first half
is warm-up: allocator growth, lazy initialisation), fit a least-squares line to memory against
time; the growth is its slope times the time the second half spans. Memory trends upward when
that growth exceeds `max_rss_growth_bytes` (host RSS) or `max_gpu_growth_bytes` (GPU, when the
target reports it). The test needs at least `min_samples` samples; with fewer the run fails as
inconclusive (raise the duration).

Invariants:
- Every failed request is a row with its error; out-of-memory errors are also counted apart.
- pass = zero errors, enough samples, no upward trend in RSS or GPU memory.
- After `max_failed_waves` consecutive waves in which every request failed, the run stops early:
  the target is down, and more waves would only repeat the same error.
- With an abuse mix (`--abuse N`, `abuse.py`), each wave also sends N abusive requests beside
  its normal ones; one answered wrongly (a 5xx, an unexpected status, no answer) is an error.
- `tok_s_drift` = mean wave tok/s over the last quarter of samples / over the first quarter
  (after the first sample); reported, not judged.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvspill.bench.suites.abuse import AbuseMix
from kvspill.bench.suites.targets import GIB, RequestSpec, Target, round_or_none, warm_up
from kvspill.errors import InvalidParameterError

_OOM = re.compile(r"out ?of ?(kv ?)?memory|outofmemory|outofkvmemory", re.IGNORECASE)


@dataclass(frozen=True)
class StabilityConfig:
    duration_s: float
    concurrency: int
    min_ctx: int
    max_ctx: int
    new_tokens: int
    seed: int = 0
    max_rss_growth_bytes: int = 64 * 2**20
    max_gpu_growth_bytes: int = 64 * 2**20
    min_samples: int = 4
    max_failed_waves: int = 3

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise InvalidParameterError("duration", f"--duration must be positive, got {self.duration_s}")
        if self.concurrency < 1:
            raise InvalidParameterError(
                "concurrency", f"--concurrency must be at least 1, got {self.concurrency}"
            )
        if not 1 <= self.min_ctx <= self.max_ctx:
            raise InvalidParameterError(
                "context_range",
                f"the context range must be MIN:MAX with 1 <= MIN <= MAX, got {self.min_ctx}:{self.max_ctx}",
            )
        if self.new_tokens < 1:
            raise InvalidParameterError(
                "new_tokens", f"--new-tokens must be at least 1, got {self.new_tokens}"
            )


@dataclass
class Trend:
    metric: str
    growth_gib: float | None  # None: not measured (too few samples, or the target does not report it)
    limit_gib: float
    upward: bool


@dataclass
class StabilityResult:
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per request
    abuse_rows: list[dict[str, Any]] = field(default_factory=list)  # one per abusive request
    samples: list[dict[str, Any]] = field(default_factory=list)  # one per wave
    errors: int = 0
    ooms: int = 0
    trends: list[Trend] = field(default_factory=list)
    tok_s_drift: float | None = None
    stopped_early: str | None = None
    inconclusive: str | None = None

    @property
    def passed(self) -> bool:
        return self.errors == 0 and self.inconclusive is None and not any(t.upward for t in self.trends)


def growth(times: list[float], values: list[float]) -> float:
    """Least-squares slope of `values` over `times`, times the span of `times` (same unit as values)."""
    n = len(times)
    mean_t, mean_v = sum(times) / n, sum(values) / n
    var = sum((t - mean_t) ** 2 for t in times)
    if var == 0:
        return 0.0
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / var
    return slope * (times[-1] - times[0])


def memory_trend(samples: list[dict[str, Any]], key: str, limit_bytes: int, min_samples: int) -> Trend:
    """The trend test of the module docstring for one memory column (GiB) of the samples."""
    limit_gib = limit_bytes / GIB
    points = [(s["t_s"], s[key]) for s in samples if s.get(key) is not None]
    if len(points) < max(min_samples, 2):
        return Trend(key, None, limit_gib, False)
    half = points[len(points) // 2 :]
    g = growth([t for t, _ in half], [v for _, v in half])
    return Trend(key, round(g, 4), limit_gib, g > limit_gib)


def _drift(samples: list[dict[str, Any]]) -> float | None:
    rates = [s["tok_s"] for s in samples[1:] if s["tok_s"]]
    quarter = len(rates) // 4
    if quarter < 1:
        return None
    first, last = sum(rates[:quarter]) / quarter, sum(rates[-quarter:]) / quarter
    return round(last / first, 3) if first > 0 else None


def _wave(
    target: Target,
    cfg: StabilityConfig,
    rng: random.Random,
    wave: int,
    t0: float,
    result: StabilityResult,
    clock: Callable[[], float],
    abuse: AbuseMix | None = None,
    abuse_per_wave: int = 0,
) -> bool:
    """One wave: its request rows and its sample. True when every request of the wave failed."""
    specs = [
        RequestSpec(rng.randint(cfg.min_ctx, cfg.max_ctx), cfg.new_tokens, seed=rng.randrange(2**31))
        for _ in range(cfg.concurrency)
    ]
    start = clock()
    with ThreadPoolExecutor(1) as side:
        abused = side.submit(abuse.send, abuse_per_wave) if abuse is not None and abuse_per_wave else None
        outcomes = target.run(specs)
        abuse_outcomes = abused.result() if abused is not None else []
    wall = max(clock() - start, 1e-9)
    for a in abuse_outcomes:
        result.abuse_rows.append(
            {"wave": wave, "t_s": round(start - t0, 3), "ok": a.ok, **dataclasses.asdict(a)}
        )
    result.errors += sum(not a.ok for a in abuse_outcomes)
    reading = target.read()
    errors = 0
    for spec, r in zip(specs, outcomes, strict=True):
        result.rows.append(
            {
                "wave": wave,
                "t_s": round(start - t0, 3),
                "ctx": spec.prompt_len,
                "new_tokens": r.new_tokens,
                "ok": r.ok,
                "err": r.err,
                "ttft_s": round_or_none(r.ttft_s),
                "decode_tok_s": round_or_none(r.decode_tok_s, 2),
                "e2e_s": round_or_none(r.e2e_s),
            }
        )
        if not r.ok:
            errors += 1
            result.ooms += bool(_OOM.search(r.err or ""))
    result.errors += errors
    result.samples.append(
        {
            "wave": wave,
            "t_s": round(clock() - t0, 3),
            "host_rss_gib": reading.host_rss_gib,
            "gpu_gib": reading.gpu_gib,
            "tok_s": round(sum(r.new_tokens for r in outcomes) / wall, 2),
            "requests": len(specs),
            "errors": errors,
            "bytes_moved": sum(reading.bytes_moved.values()),
        }
    )
    return errors == len(specs)


def run_stability(
    target: Target,
    cfg: StabilityConfig,
    advance: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    warmup: bool = True,
    abuse: AbuseMix | None = None,
    abuse_per_wave: int = 0,
) -> StabilityResult:
    """Run waves for `cfg.duration_s` (after one warm-up request, outside the clock);
    `advance(seconds)` as time passes."""
    result = StabilityResult()
    if warmup:
        warm_up(target)
    rng = random.Random(cfg.seed)
    t0 = last = clock()
    failed_waves = 0
    wave = 0
    while clock() - t0 < cfg.duration_s:
        all_failed = _wave(target, cfg, rng, wave, t0, result, clock, abuse, abuse_per_wave)
        wave += 1
        now = clock()
        if advance is not None:
            advance(min(now, t0 + cfg.duration_s) - last)
        last = now
        failed_waves = failed_waves + 1 if all_failed else 0
        if failed_waves >= cfg.max_failed_waves:
            result.stopped_early = f"stopped after {failed_waves} waves in which every request failed"
            break
    if advance is not None:
        advance(max(0.0, t0 + cfg.duration_s - last))
    result.trends = [
        memory_trend(result.samples, "host_rss_gib", cfg.max_rss_growth_bytes, cfg.min_samples),
        memory_trend(result.samples, "gpu_gib", cfg.max_gpu_growth_bytes, cfg.min_samples),
    ]
    result.tok_s_drift = _drift(result.samples)
    if len(result.samples) < cfg.min_samples and result.stopped_early is None:
        result.inconclusive = (
            f"{len(result.samples)} samples, the trend test needs {cfg.min_samples}: "
            "raise --duration or lower --concurrency/--new-tokens"
        )
    return result


def summary_lines(result: StabilityResult) -> list[str]:
    verdict = "PASS" if result.passed else "FAIL"
    lines = [
        f"{verdict}: {len(result.rows)} requests, {result.errors} errors ({result.ooms} out of memory), "
        f"{len(result.samples)} samples"
    ]
    for t in result.trends:
        if t.growth_gib is None:
            lines.append(f"{t.metric}: not measured")
        else:
            word = "UPWARD" if t.upward else "flat"
            lines.append(
                f"{t.metric}: {word}, {t.growth_gib:+.4f} GiB over the second half "
                f"(limit {t.limit_gib:.4f} GiB)"
            )
    if result.tok_s_drift is not None:
        lines.append(f"tok/s drift (last quarter / first quarter): {result.tok_s_drift:.3f}")
    for note in (result.stopped_early, result.inconclusive):
        if note:
            lines.append(note)
    errs: dict[str, int] = {}
    if result.abuse_rows:
        kinds: dict[str, int] = {}
        for row in result.abuse_rows:
            kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
        bad = sum(not row["ok"] for row in result.abuse_rows)
        lines.append(
            f"abuse: {len(result.abuse_rows)} requests ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}), "
            f"{bad} answered wrongly"
        )
    for row in [*result.rows, *result.abuse_rows]:
        if not row["ok"]:
            errs[str(row["err"])] = errs.get(str(row["err"]), 0) + 1
    lines += [f"error x{n}: {err}" for err, n in sorted(errs.items(), key=lambda kv: -kv[1])[:10]]
    return lines


def figures(result: StabilityResult, cfg: StabilityConfig) -> dict[str, Any]:
    """The run's summary as the registry keeps it (`registry/results.py`)."""
    rates = [s["tok_s"] for s in result.samples if s.get("tok_s")]
    growth = {t.metric: t.growth_gib for t in result.trends}
    return {
        "duration_s": cfg.duration_s,
        "concurrency": cfg.concurrency,
        "context_range": [cfg.min_ctx, cfg.max_ctx],
        "requests": len(result.rows),
        "errors": result.errors,
        "ooms": result.ooms,
        "samples": len(result.samples),
        "rss_growth_gib": growth.get("host_rss_gib"),
        "gpu_growth_gib": growth.get("gpu_gib"),
        "tok_s_mean": round(sum(rates) / len(rates), 2) if rates else None,
        "tok_s_drift": result.tok_s_drift,
        "note": result.stopped_early or result.inconclusive,
    }


def _thin(samples: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """At most `most` samples, evenly spaced, the first and the last always among them."""
    if len(samples) <= most:
        return samples
    step = (len(samples) - 1) / (most - 1)
    return [samples[round(i * step)] for i in range(most)]


def write_results(
    out_dir: Path,
    result: StabilityResult,
    cfg: StabilityConfig,
    header: dict[str, Any],
    info: dict[str, Any],
    command: str | None = None,
) -> list[Path]:
    """results.{jsonl,csv} (requests), samples.{jsonl,csv} (waves), stability.png and report.md."""
    from kvspill.bench.suites import plots, report

    paths = report.write_rows(out_dir, "results", [{**header, **r} for r in result.rows])
    paths += report.write_rows(out_dir, "samples", [{**header, **s} for s in result.samples])
    if result.abuse_rows:
        paths += report.write_rows(out_dir, "abuse", [{**header, **r} for r in result.abuse_rows])
    title = f"stability: {info.get('model') or info.get('url')}, concurrency {cfg.concurrency}"
    paths.append(plots.plot_stability(out_dir / "stability.png", result.samples, title))
    failed = [r for r in result.rows if not r["ok"]]
    sections = [
        ("Verdict", summary_lines(result)),
        (
            "Load",
            [
                f"- duration {cfg.duration_s:g} s, concurrency {cfg.concurrency}, contexts "
                f"{cfg.min_ctx}..{cfg.max_ctx} tokens, {cfg.new_tokens} new tokens per request"
            ],
        ),
        (
            "Samples (one per wave; at most 20 shown, evenly spaced: samples.csv has all)",
            report.markdown_table(
                _thin(result.samples, 20),
                ("wave", "t_s", "host_rss_gib", "gpu_gib", "tok_s", "requests", "errors", "bytes_moved"),
            ),
        ),
        (
            "Errors (the first 20: results.csv has all)",
            report.markdown_table(failed[:20], ("wave", "t_s", "ctx", "err")) if failed else ["none"],
        ),
        ("Plot", ["![stability](stability.png)"]),
        ("Setup", report.setup_lines(header, {"target": info}, command)),
        (
            "Pass rule",
            [
                "Pass = zero failed requests, at least "
                f"{cfg.min_samples} samples, and no upward memory trend: over the second half of the samples, "
                "the least-squares slope of memory against time times the time that half spans must stay "
                f"below {cfg.max_rss_growth_bytes / GIB:.4f} GiB for host RSS and "
                f"{cfg.max_gpu_growth_bytes / GIB:.4f} GiB for GPU memory (when reported).",
            ],
        ),
    ]
    paths.append(report.write_report(out_dir, "kvspill bench stability", sections))
    return paths
