"""Supervise one child `kvspill serve --profile NAME`: start, stop, switch, restart on crash.

Invariants:
- At most one child at a time; `start`/`stop`/`switch` hold one lock, so two clicks never
  leave two servers on the port.
- The child's stdout and stderr go to a rotating log file (`logging.handlers.RotatingFileHandler`)
  and the last lines stay in memory for `/api/logs`; uvicorn's access lines of the manager's own
  probes (GET /health) and of the dashboard's polling (marked `POLL_QUERY`) are left out.
- A child that exits while it should run is restarted after a backoff that doubles from
  `backoff_s` up to `max_backoff_s`; the backoff resets once a child has been healthy for
  `stable_s`. `stop` ends supervision first, so a stopped child is never restarted.
- A child that exits `max_failed_starts` times in a row without ever answering /health is not
  started again: state `failed`, with its last error line (a profile that cannot start on this
  host was restarted forever; issue 53).
- `state` is one of stopped | starting | running | stopping | backoff | failed (health from GET /health).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvspill.dashboard.page import POLL_QUERY

_HEALTH_PROBE = '"GET /health HTTP/1.1"'


def is_probe_line(line: str) -> bool:
    """An access line of the manager's health probe or of the dashboard's polling (several a second)."""
    return _HEALTH_PROBE in line or POLL_QUERY in line


@dataclass
class ChildSpec:
    """How to start the child: a saved profile served on `port`."""

    profile: str
    port: int
    host: str = "127.0.0.1"
    api_key: str | None = None
    extra_args: tuple[str, ...] = ()

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kvspill", "serve", "--profile", self.profile]
        return cmd + ["--host", self.host, "--port", str(self.port), *self.extra_args]

    def env(self) -> dict[str, str]:
        """The key goes in the environment, so it shows in neither `ps` nor the logs."""
        return {"KVSPILL_API_KEY": self.api_key} if self.api_key else {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass
class ChildStatus:
    state: str = "stopped"
    profile: str | None = None
    pid: int | None = None
    url: str | None = None
    started_at: float | None = None
    restarts: int = 0
    failed_starts: int = 0  # exits in a row before the child ever answered /health
    last_exit_code: int | None = None
    next_restart_in_s: float | None = None
    error: str | None = None
    history: list[str] = field(default_factory=list)


class Supervisor:
    def __init__(
        self,
        log_dir: Path,
        data_dir: Path,
        *,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        stable_s: float = 60.0,
        log_bytes: int = 5 << 20,
        log_backups: int = 3,
        env: dict[str, str] | None = None,
        max_failed_starts: int = 3,
    ) -> None:
        self.data_dir = data_dir
        self.backoff_s, self.max_backoff_s, self.stable_s = backoff_s, max_backoff_s, stable_s
        self.max_failed_starts = max_failed_starts
        self.env = dict(os.environ, KVSPILL_DATA_DIR=str(data_dir), **(env or {}))
        self.status = ChildStatus()
        self.spec: ChildSpec | None = None
        self.recent: deque[str] = deque(maxlen=2000)
        self._tail: deque[str] = deque(maxlen=20)  # the running child's last lines: why it exited
        self._pump_thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._wanted = False
        self._generation = 0  # bumps on every start/stop: old watcher threads then leave quietly
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "serve.log"
        self._log = logging.getLogger(f"kvspill.manager.child.{id(self)}")
        self._log.propagate = False
        handler = logging.handlers.RotatingFileHandler(
            self.log_path, maxBytes=log_bytes, backupCount=log_backups
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._log.addHandler(handler)
        self._log.setLevel(logging.INFO)

    # control

    def start(self, spec: ChildSpec) -> ChildStatus:
        with self._lock:
            self._stop_locked()
            self.spec, self._wanted = spec, True
            self.status = ChildStatus(profile=spec.profile, url=spec.url)
            self._spawn_locked()
            return self.status

    def switch(self, profile: str) -> ChildStatus:
        with self._lock:
            if self.spec is None:
                raise RuntimeError("nothing was started yet: start a profile first")
            spec = ChildSpec(profile, self.spec.port, self.spec.host, self.spec.api_key, self.spec.extra_args)
            return self.start(spec)

    def restart(self) -> ChildStatus:
        with self._lock:
            if self.spec is None:
                raise RuntimeError("nothing was started yet: start a profile first")
            return self.start(self.spec)

    def stop(self, timeout_s: float = 20.0) -> ChildStatus:
        with self._lock:
            self._stop_locked(timeout_s)
            self.status.state, self.status.pid, self.status.next_restart_in_s = "stopped", None, None
            return self.status

    def _stop_locked(self, timeout_s: float = 20.0) -> None:
        self._wanted = False
        self._generation += 1
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        self.status.state = "stopping"  # from here the child's routes are not forwarded
        self._note(f"stopping pid {proc.pid}")
        proc.terminate()  # SIGTERM: the server drains in-flight requests first
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _spawn_locked(self) -> None:
        assert self.spec is not None
        self._generation += 1
        generation = self._generation
        self._note(f"starting: {' '.join(self.spec.command()[2:])}")
        proc = subprocess.Popen(
            self.spec.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env | self.spec.env(),
        )
        self._proc = proc
        self.status.state, self.status.pid = "starting", proc.pid
        self.status.started_at, self.status.next_restart_in_s = time.time(), None
        self._tail.clear()
        self._pump_thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self._pump_thread.start()
        threading.Thread(target=self._watch, args=(proc, generation), daemon=True).start()

    # threads

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if is_probe_line(line):
                continue
            self._tail.append(line)
            self.recent.append(line)
            self._log.info(line)

    def _note(self, text: str) -> None:
        line = f"[manager {time.strftime('%H:%M:%S')}] {text}"
        self.recent.append(line)
        self._log.info(line)
        self.status.history = [*self.status.history[-19:], line]

    def _watch(self, proc: subprocess.Popen[bytes], generation: int) -> None:
        healthy_since: float | None = None
        while proc.poll() is None:
            if generation != self._generation:
                return
            ok = self._healthy()
            with self._lock:
                if generation != self._generation:
                    return
                if ok and healthy_since is None:
                    healthy_since = time.monotonic()
                    self.status.state, self.status.error = "running", None
                    self.status.failed_starts = 0
                    self._note(f"pid {proc.pid} is healthy")
                if healthy_since is not None and time.monotonic() - healthy_since > self.stable_s:
                    self.status.restarts = 0  # stable again: the next crash starts the backoff afresh
            time.sleep(0.25 if healthy_since is None else 2.0)  # fast to notice the start, then quiet
        self._after_exit(proc, generation, healthy_since is not None)

    def _after_exit(self, proc: subprocess.Popen[bytes], generation: int, was_healthy: bool) -> None:
        pump = self._pump_thread
        if pump is not None:
            pump.join(2.0)  # its last lines say why the child exited
        with self._lock:
            if generation != self._generation or not self._wanted:
                return
            self.status.last_exit_code = proc.returncode
            self.status.failed_starts = 0 if was_healthy else self.status.failed_starts + 1
            if self.status.failed_starts >= self.max_failed_starts:
                self._give_up_locked(proc.returncode)
                return
            delay = min(self.max_backoff_s, self.backoff_s * 2**self.status.restarts)
            self.status.state, self.status.next_restart_in_s = "backoff", delay
            self.status.error = f"the server exited with code {proc.returncode}; restarting in {delay:.1f} s"
            self._note(self.status.error)
            self.status.restarts += 1
        threading.Timer(delay, self._restart_after_backoff, args=(generation,)).start()

    def _give_up_locked(self, code: int | None) -> None:
        self._wanted = False
        self.status.state, self.status.pid, self.status.next_restart_in_s = "failed", None, None
        self.status.error = (
            f"the server exited with code {code} {self.status.failed_starts} times in a row before it "
            f"answered /health; not restarted: {last_error(list(self._tail))}"
        )
        self._note(self.status.error)

    def _restart_after_backoff(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation and self._wanted:
                self._spawn_locked()

    def _healthy(self) -> bool:
        assert self.spec is not None
        try:
            with urllib.request.urlopen(self.spec.url + "/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {**self.status.__dict__, "log_path": str(self.log_path)}


def last_error(lines: list[str]) -> str:
    """The line of a child's output that says why it stopped: its last `error:` line (the CLI's
    one-line errors), else its last line."""
    for line in reversed(lines):
        if line.lower().startswith("error"):
            return line
    return lines[-1] if lines else "it printed nothing"
