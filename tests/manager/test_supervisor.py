"""The supervisor without a real server: a child that fails at start is backed off and then given
up with its error line; the poll and probe access lines stay out of the captured log."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kvspill.manager.supervisor import ChildSpec, Supervisor, is_probe_line, last_error

from .conftest import wait_for


@dataclass
class _FailingSpec(ChildSpec):
    """A child that prints what `kvspill serve` prints for a profile it refuses, then exits 1."""

    def command(self) -> list[str]:
        script = "print('loading'); print('error: --cpu-offload-gb moves weights off a CUDA GPU'); raise SystemExit(1)"
        return [sys.executable, "-c", script]


def test_a_child_failing_at_start_is_given_up_with_its_error(tmp_path: Path):
    supervisor = Supervisor(tmp_path / "logs", tmp_path, backoff_s=0.05, max_failed_starts=3)
    supervisor.start(_FailingSpec("broken", port=1))
    wait_for("the supervisor to give up", lambda: supervisor.status.state == "failed", 30)
    status = supervisor.snapshot()
    assert status["failed_starts"] == 3 and status["restarts"] == 2 and status["last_exit_code"] == 1
    assert "3 times in a row" in status["error"] and "--cpu-offload-gb" in status["error"]
    assert status["pid"] is None and status["next_restart_in_s"] is None
    starts = [line for line in supervisor.recent if "starting:" in line]
    assert len(starts) == 3  # not restarted again
    supervisor.stop()
    assert supervisor.status.state == "stopped"


def test_probe_and_poll_lines_are_left_out():
    assert is_probe_line('INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK')
    assert is_probe_line('INFO:     127.0.0.1:5 - "GET /v1/kv?kvspill_poll=1 HTTP/1.1" 200 OK')
    assert not is_probe_line('INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert not is_probe_line('INFO:     127.0.0.1:5 - "GET /v1/kv HTTP/1.1" 200 OK')  # another client's


def test_last_error_prefers_the_error_line():
    assert last_error(["a", "error: bad flag", "Traceback done"]) == "error: bad flag"
    assert last_error(["a", "b"]) == "b"
    assert last_error([]) == "it printed nothing"
