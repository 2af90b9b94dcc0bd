"""The start-up benchmark's arithmetic and its failure paths (kvspill/bench/startup_check.py); it
is never timed here."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kvspill.bench.startup_check import (
    QUESTIONS,
    RequestTiming,
    StartupReport,
    format_report,
    wait_for_health,
)


def test_first_over_steady_divides_by_the_median_of_the_others() -> None:
    report = StartupReport(
        4.2,
        [RequestTiming(0.6, 1.0), RequestTiming(0.2, 0.5), RequestTiming(0.4, 0.7), RequestTiming(0.3, 0.6)],
    )
    assert report.steady_ttft_s == pytest.approx(0.3)
    assert report.first_over_steady == pytest.approx(2.0)
    text = format_report(report)
    assert text.startswith("/health 200 after 4.20 s") and "2.00x" in text


def test_one_request_has_no_steady_figure() -> None:
    report = StartupReport(1.0, [RequestTiming(0.5, 0.9)])
    assert report.steady_ttft_s is None and report.first_over_steady is None
    assert "x" not in format_report(report).splitlines()[-1]


def test_questions_share_no_first_word() -> None:
    firsts = [q.split()[0] for q in QUESTIONS]
    assert len(set(firsts)) == len(firsts)


def test_a_server_that_exits_is_an_error_not_a_wait() -> None:
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="exited with code 3"):
        wait_for_health(1, child, time.perf_counter(), timeout_s=60)
