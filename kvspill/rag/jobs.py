"""Index jobs: what `POST /precache/repo` runs, with a state, progress and a cancel flag.

Invariants:
- At most `max_running` jobs run at once, each on a daemon thread of its own (a job never keeps
  the process alive past its shutdown); up to `max_queued` more wait, first come first run; past
  that `submit` raises JobsFullError (HTTP 503 with Retry-After).
- A job's state moves queued -> running -> done | failed | cancelled, or queued -> cancelled,
  and never back. A job cancelled while its swap runs finishes `done`: the swap is one
  transaction, and past its last check an index completes.
- Cancelling sets the job's `IndexProgress` flag; the index stops at its next check with the
  index unchanged (`service.py`).
- The last `max_history` finished jobs are kept for GET; older ones are forgotten. Queued and
  running ones are always kept (there are at most max_running + max_queued of them).
- After `shutdown()` no job is admitted (JobsClosedError) and every queued or running one is
  cancelled; `wait_idle` waits for the running ones to stop.
- Torch- and web-free: a job is a callable over an `IndexProgress`.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from kvspill.rag.errors import IndexCancelledError, JobsClosedError, JobsFullError
from kvspill.rag.types import IndexProgress, IndexReport

logger = logging.getLogger("kvspill.rag")

JobState = Literal["queued", "running", "done", "failed", "cancelled"]
MAX_RUNNING = 2  # the model runs one forward at a time; a second job walks and hashes meanwhile
MAX_QUEUED = 4
MAX_HISTORY = 100


@dataclass
class IndexJob:
    job_id: str
    repo: str  # the indexed directory as clients see it
    work: Callable[[IndexProgress], IndexReport]
    progress: IndexProgress = field(default_factory=IndexProgress)
    state: JobState = "queued"
    created_at: float = field(default_factory=time.time)  # Unix seconds
    started_at: float | None = None
    finished_at: float | None = None
    report: IndexReport | None = None
    error: BaseException | None = None  # why it failed or was cancelled (IndexCancelledError)
    done: Future[None] = field(default_factory=Future)  # resolved once the state is final

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")

    @property
    def seconds(self) -> float:
        """Seconds it ran (so far)."""
        if self.started_at is None:
            return 0.0
        return (self.finished_at or time.time()) - self.started_at


class IndexJobs:
    def __init__(
        self, max_running: int = MAX_RUNNING, max_queued: int = MAX_QUEUED, max_history: int = MAX_HISTORY
    ) -> None:
        self.max_running = max_running
        self.max_queued = max_queued
        self.max_history = max_history
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, IndexJob] = OrderedDict()  # oldest first
        self._queue: deque[IndexJob] = deque()
        self._threads: dict[str, threading.Thread] = {}  # running job id -> its thread
        self._closed = ""  # why no job is admitted any more ("" while open)
        self.closed_at: float | None = None  # time.monotonic() of `shutdown`

    @property
    def closed(self) -> bool:
        """Whether `shutdown` ran (no job is admitted any more)."""
        return bool(self._closed)

    def submit(self, repo: str, work: Callable[[IndexProgress], IndexReport]) -> IndexJob:
        """Queue `work` (started at once if a slot is free)."""
        with self._lock:
            if self._closed:
                raise JobsClosedError(self._closed)
            if len(self._queue) >= self.max_queued:
                raise JobsFullError(
                    f"{len(self._threads)} index jobs run and {len(self._queue)} wait, as many as this "
                    "server takes: retry later, or cancel one (DELETE /precache/jobs/{id})"
                )
            job = IndexJob(secrets.token_hex(8), repo, work)
            self._jobs[job.job_id] = job
            self._queue.append(job)
            self._start_queued()
            self._forget_old()
        return job

    def get(self, job_id: str) -> IndexJob | None:
        return self._jobs.get(job_id)

    def list(self) -> list[IndexJob]:
        """Every job kept, newest first."""
        with self._lock:
            return list(reversed(self._jobs.values()))

    def cancel(self, job_id: str, reason: str) -> IndexJob | None:
        """Cancel a job: a queued one at once, a running one at its next check; a finished one
        is left as it is. None for an unknown id."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.finished:
                return job
            job.progress.request_cancel(reason)
            if job.state == "queued":
                self._queue.remove(job)
                self._finish(job, "cancelled", error=IndexCancelledError(reason))
        return job

    def shutdown(self, reason: str) -> None:
        """Admit nothing more; cancel every queued and running job."""
        with self._lock:
            self._closed = reason
            self.closed_at = time.monotonic()
            ids = [job.job_id for job in self._jobs.values() if not job.finished]
        for job_id in ids:
            self.cancel(job_id, reason)
        if ids:
            logger.info("cancelled %d index job(s): %s", len(ids), reason)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the running jobs to stop; whether they all did."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def _start_queued(self) -> None:
        """Under the lock: start queued jobs while a slot is free."""
        while self._queue and len(self._threads) < self.max_running:
            job = self._queue.popleft()
            job.state, job.started_at = "running", time.time()
            thread = threading.Thread(target=self._run, args=(job,), name=f"index-{job.job_id}", daemon=True)
            self._threads[job.job_id] = thread
            thread.start()

    def _run(self, job: IndexJob) -> None:
        try:
            report = job.work(job.progress)
        except IndexCancelledError as e:
            outcome: tuple[JobState, IndexReport | None, BaseException | None] = ("cancelled", None, e)
        except Exception as e:  # the job's answer (a 4xx or 500 for whoever asks), not the server's end
            outcome = ("failed", None, e)
        else:
            outcome = ("done", report, None)
        with self._lock:
            self._threads.pop(job.job_id, None)
            self._finish(job, *outcome)
            self._start_queued()
            self._forget_old()

    def _finish(
        self,
        job: IndexJob,
        state: JobState,
        report: IndexReport | None = None,
        error: BaseException | None = None,
    ) -> None:
        job.report, job.error, job.finished_at = report, error, time.time()
        job.state = state  # last: a reader that sees a final state sees its report or error
        job.progress.phase = "finished"
        job.done.set_result(None)

    def _forget_old(self) -> None:
        """Under the lock: drop the oldest finished jobs past `max_history`."""
        finished = [job_id for job_id, job in self._jobs.items() if job.finished]
        for job_id in finished[: max(0, len(finished) - self.max_history)]:
            del self._jobs[job_id]
