"""`kvspill pull` as a manager job: the download runs on a thread (`registry/pull.py`'s
`pull_model`, the CLI's core) while the page polls the job's progress.

Invariants:
- Progress is what is in the Hugging Face cache's blob folder of the repo (finished and
  `.incomplete` files) against the size of the files the pull selects (`hub_files.select_files`
  over the repo's tree, sizes included): huggingface_hub downloads there, so nothing about its
  transfer needs changing. Files cached before the pull count as done.
- A job ends `done` with the registered model's name, or `failed` with the pull's one-line
  error; it never raises into the manager. Jobs are kept in memory, the last `MAX_JOBS`.
- A bad reference (not org/name, org/name:TAG or org/name/file.gguf) is refused before any job.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvspill.errors import KvspillError
from kvspill.registry.hub_files import HubRef, parse_ref, select_files
from kvspill.registry.pull import pull_model
from kvspill.registry.store import Registry, RegistryError

MAX_JOBS = 50
POLL_S = 0.5


@dataclass
class PullJob:
    id: str
    model: str
    state: str = "running"  # running | done | failed
    total_bytes: int | None = None  # the selected files' size; None until the tree is read
    done_bytes: int = 0
    error: str | None = None
    registered: str | None = None  # the registry name once done
    started_at: float = 0.0
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class PullJobs:
    def __init__(self, registry: Registry, cache_dir: str | Path | None = None, endpoint: str | None = None):
        self.registry, self.cache_dir, self.endpoint = registry, cache_dir, endpoint
        self._jobs: dict[str, PullJob] = {}
        self._lock = threading.Lock()

    def start(self, model: str) -> PullJob:
        ref = parse_ref(model)
        if ref is None:
            raise RegistryError(
                f"{model!r} is not a Hugging Face model: write org/name, org/name:Q4_K_M or "
                "org/name/file.gguf (a path on this host: add it as a path)"
            )
        job = PullJob(uuid.uuid4().hex[:12], model, started_at=time.time())
        with self._lock:
            self._jobs[job.id] = job
            for old in list(self._jobs)[:-MAX_JOBS]:
                del self._jobs[old]
        threading.Thread(target=self._run, args=(job, ref), daemon=True, name=f"pull-{job.id}").start()
        return job

    def get(self, job_id: str) -> PullJob:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise RegistryError(
                f"no pull job {job_id!r} (jobs are kept in memory until the manager restarts)"
            )
        return job

    def jobs(self) -> list[PullJob]:
        with self._lock:
            return list(self._jobs.values())

    def _run(self, job: PullJob, ref: HubRef) -> None:
        finished = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(job, ref, finished), daemon=True)
        watcher.start()
        try:
            pulled = pull_model(job.model, self.registry, cache_dir=self.cache_dir, endpoint=self.endpoint)
            job.registered, job.state = pulled.entry.name, "done"
            job.done_bytes = job.total_bytes or pulled.entry.size_bytes or job.done_bytes
        except KvspillError as e:
            job.error, job.state = str(e), "failed"
        except Exception as e:  # a thread's failure still ends the job with a message
            job.error, job.state = f"the pull failed: {type(e).__name__}: {e}", "failed"
        finally:
            finished.set()
            job.finished_at = time.time()

    def _watch(self, job: PullJob, ref: HubRef, finished: threading.Event) -> None:
        job.total_bytes = self._selected_bytes(ref)
        blobs = self._repo_dir(ref) / "blobs"
        while not finished.wait(POLL_S):
            cached = _folder_bytes(blobs)  # other tags pulled before share the folder: cap at the total
            job.done_bytes = min(cached, job.total_bytes) if job.total_bytes else cached

    def _selected_bytes(self, ref: HubRef) -> int | None:
        """The size of what the pull downloads; None where the tree cannot be read (the pull says why)."""
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        try:
            tree = HfApi(endpoint=self.endpoint).list_repo_tree(ref.repo_id, recursive=True)
            sizes = {f.path: f.size for f in tree if isinstance(f, RepoFile)}
            return sum(sizes[f] for f in select_files(ref, list(sizes)).files)
        except Exception:  # the same failure reaches the pull itself, which reports it
            return None

    def _repo_dir(self, ref: HubRef) -> Path:
        from huggingface_hub import constants
        from huggingface_hub.file_download import repo_folder_name

        root = Path(self.cache_dir) if self.cache_dir is not None else Path(constants.HF_HUB_CACHE)
        return root / repo_folder_name(repo_id=ref.repo_id, repo_type="model")


def _folder_bytes(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:  # not created yet, or a file renamed while read
        return 0
