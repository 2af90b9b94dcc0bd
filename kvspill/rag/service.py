"""`RagService`: cache-aware embedding, repository indexing and search, for the HTTP routes and
the `kvspill rag` CLI alike.

Invariants:
- Every text is embedded at most once per model: the store maps sha256(text) -> vector, and a
  request's duplicates are embedded once.
- `precache_repo` chunks only files whose content hash changed, embeds only chunks whose text
  is not cached, and drops the chunks of files that are gone (or can no longer be read).
- A path must resolve inside one of the access policy's roots (symlinks resolved first); anything
  else is a `ForbiddenPathError` naming the field (HTTP 403). So is a directory to index that the
  policy leaves out: hidden, `.git` or deny-listed at any component below its root
  (`rag/files.py` `PathRules`). Search and stats see only the repos under those roots, named
  relative to their root (`rag/access.py`).
- A re-index that would drop more files than it adds needs `allow_removal` (a filter that
  matches nothing must not empty an index another client built).
- An index reports its progress and stops at its cancel flag (`IndexProgress`) between
  directories, files and embedding batches, always before the store's swap: a cancelled index
  leaves the repo's files, chunks and generation as they were. Vectors it embedded stay in the
  cache (keyed by content, so the next index of the same files reuses them).
- Search is hybrid by default: the dense (cosine) ranking and the full-text (FTS5 bm25 over
  identifier terms, `lexical.py`) ranking fused by reciprocal rank (`fusion.py`); "dense" mode is
  the cosine ranking alone, exactly as before hybrid search. A hit's `score` is its cosine in
  both modes; `fused_score` is the RRF score the hybrid order follows.
- Torch-free: the model is an `Embedder`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kvspill.errors import InvalidParameterError
from kvspill.rag.access import AccessPolicy, secret_reason
from kvspill.rag.chunker import chunk_embedding_text, chunk_lines
from kvspill.rag.files import FileFilter, PathRules, check_filter, iter_sources, read_text, walk_files
from kvspill.rag.fusion import CANDIDATES, reciprocal_rank_fusion
from kvspill.rag.index import DEFAULT_ANN_THRESHOLD, IndexCache
from kvspill.rag.lexical import match_expression
from kvspill.rag.store import EmbeddingStore, FileUpdate, content_hash, text_hash
from kvspill.rag.types import (
    ChunkingConfig,
    Embedder,
    EmbedResult,
    IndexProgress,
    IndexReport,
    RagLimits,
    SearchHit,
    SkippedFile,
)

# Chunks embedded (and written) at a time while indexing: the model's own batch, so that a cancel
# (a DELETE, SIGTERM) waits for at most one forward. 32 chunks take ~5 s on 2 cores; batches of 8
# would answer in 2 s but embed at 4.0 chunks/s against 6.0 (all-MiniLM-L6-v2, 2026-12-01).
EMBED_BATCH = 32
REPO_LOCK_POLL_S = 0.1
SEARCH_MODES = ("hybrid", "dense")  # the first is the default of every route and command


class _Counters:
    """Cache hits and misses and model throughput since start (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.num_embedded = 0
        self.embed_seconds = 0.0

    def count(self, hits: int, misses: int) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses

    def embedded(self, num: int, seconds: float) -> None:
        with self._lock:
            self.num_embedded += num
            self.embed_seconds += seconds


class RagService:
    def __init__(
        self,
        embedder: Embedder,
        store: EmbeddingStore,
        access: AccessPolicy | Path,
        limits: RagLimits | None = None,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
    ) -> None:
        """`access`: the reading rules, or one root directory with the default rules."""
        self.embedder = embedder
        self.store = store
        self.access = (
            access if isinstance(access, AccessPolicy) else AccessPolicy.create([access], db_path=store.path)
        )
        self.path_rules = PathRules(self.access)  # the policy's hidden and deny-list rules, compiled
        self.limits = limits or RagLimits()
        self.counters = _Counters()
        self.indexes = IndexCache(self._load_vectors, store.generation, ann_threshold)
        self._repo_locks: dict[str, threading.Lock] = {}
        self._repo_locks_lock = threading.Lock()

    @property
    def allowed_root(self) -> Path:
        """The first root (the only one of a server started with one --rag-root)."""
        return self.access.roots[0]

    @property
    def model_name(self) -> str:
        return self.embedder.name

    # embedding

    def check_texts(self, texts: list[str], param: str) -> None:
        if not texts:
            raise InvalidParameterError(param, f"`{param}` is empty: give at least one text")
        if len(texts) > self.limits.max_inputs:
            raise InvalidParameterError(
                param, f"{len(texts)} inputs in one request; send at most {self.limits.max_inputs}"
            )
        for i, text in enumerate(texts):
            if not text.strip():
                raise InvalidParameterError(param, f"input {i} is empty or only whitespace")
            if len(text) > self.limits.max_input_chars:
                raise InvalidParameterError(
                    param,
                    f"input {i} has {len(text)} characters; at most {self.limits.max_input_chars} are "
                    f"taken (the model reads its first {self.embedder.max_seq_length} tokens anyway)",
                )

    def embed(self, texts: list[str], use_cache: bool = True, param: str = "input") -> EmbedResult:
        """Unit vectors of `texts`, from the cache where it has them."""
        self.check_texts(texts, param)
        keys = [text_hash(t) for t in texts]
        found = self.store.get_vectors(self.model_name, keys) if use_cache else {}
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        fresh_keys = set(missing)
        if missing:
            first_text = {k: t for k, t in zip(keys, texts, strict=True)}
            fresh = self._encode([first_text[k] for k in missing])
            pairs = list(zip(missing, fresh, strict=True))
            self.store.put_vectors(self.model_name, pairs, time.time())
            found.update(pairs)
        cached = [use_cache and k not in fresh_keys for k in keys]
        self.counters.count(sum(cached), len(texts) - sum(cached))
        vectors = np.stack([found[k] for k in keys]).astype(np.float32, copy=False)
        return EmbedResult(vectors, cached)

    def embed_token_ids(self, token_ids: list[list[int]], param: str = "input") -> np.ndarray:
        """Vectors of inputs given as token ids (not cached: ids are rare and cheap to hash wrongly)."""
        if not token_ids or any(not ids for ids in token_ids):
            raise InvalidParameterError(param, "token id inputs must be non-empty lists of token ids")
        if len(token_ids) > self.limits.max_inputs:
            raise InvalidParameterError(
                param, f"{len(token_ids)} inputs in one request; send at most {self.limits.max_inputs}"
            )
        vocab = self.embedder.vocab_size
        for i, ids in enumerate(token_ids):
            bad = next((t for t in ids if not 0 <= t < vocab), None)
            if bad is not None:
                raise InvalidParameterError(
                    param, f"input {i}: token id {bad} is outside the vocabulary [0, {vocab})"
                )
        start = time.perf_counter()
        vectors = self.embedder.encode_ids(token_ids)
        self.counters.embedded(len(token_ids), time.perf_counter() - start)
        self.counters.count(0, len(token_ids))
        return vectors

    def _encode(self, texts: list[str]) -> np.ndarray:
        start = time.perf_counter()
        vectors = self.embedder.encode(texts)
        self.counters.embedded(len(texts), time.perf_counter() - start)
        return vectors

    # paths

    def resolve_path(self, path: str, param: str = "path", to_index: bool = True) -> Path:
        """`path` (absolute, or relative to the first root) as an absolute directory inside a root.
        `~` is not expanded: a client names directories of the server's roots, not its home.
        `to_index`: also refuse (403) a path the policy leaves out, at any component below its
        root (a hidden or deny-listed folder, or file, asked for by name: `PathRules`)."""
        if not path.strip():
            raise InvalidParameterError(param, f"`{param}` is empty: give a directory under the allowed root")
        candidate = Path(path)
        try:
            resolved = (candidate if candidate.is_absolute() else self.allowed_root / candidate).resolve()
        except (OSError, RuntimeError, ValueError) as e:  # a symlink loop; a NUL byte in the path
            raise InvalidParameterError(param, f"{path} cannot be resolved: {e}") from e
        if to_index:
            self.path_rules.check_requested(resolved, path, param)
        else:
            self.access.check_inside(resolved, path, param)
        if not resolved.is_dir():
            what = "a file" if resolved.exists() else "missing"
            raise InvalidParameterError(
                param, f"{path} is {what}: give a directory under {self.allowed_root}"
            )
        return resolved

    def _repo_lock(self, repo: str) -> threading.Lock:
        with self._repo_locks_lock:
            return self._repo_locks.setdefault(repo, threading.Lock())

    # indexing

    def precache_repo(
        self,
        path: str,
        file_filter: FileFilter | None = None,
        chunking: ChunkingConfig | None = None,
        allow_removal: bool = False,
        progress: IndexProgress | None = None,
    ) -> IndexReport:
        """Index the directory `path`: embed what changed since the last time, drop what is gone
        (past as many files as it adds, only with `allow_removal`). `progress`: filled in as it
        goes; its cancel flag stops the index (IndexCancelledError) with the index unchanged."""
        root = self.resolve_path(path)
        repo = str(root)
        progress = progress if progress is not None else IndexProgress()
        progress.phase = "waiting"
        lock = self._repo_lock(repo)
        while not lock.acquire(timeout=REPO_LOCK_POLL_S):  # one index of a repo at a time
            progress.check()
        try:
            return self._index(
                root, repo, file_filter or FileFilter(), chunking or ChunkingConfig(), allow_removal, progress
            )
        finally:
            lock.release()

    def index_work(
        self, path: str, file_filter: FileFilter, chunking: ChunkingConfig, allow_removal: bool
    ) -> tuple[str, Callable[[IndexProgress], IndexReport]]:
        """(the repo as clients see it, the index to run as a job), the path and globs checked
        now: a bad request is refused before it is queued."""
        root = self.resolve_path(path)
        check_filter(file_filter)

        def work(progress: IndexProgress) -> IndexReport:
            return self.precache_repo(path, file_filter, chunking, allow_removal, progress)

        return self.access.display(str(root)), work

    def _list_files(
        self, root: Path, file_filter: FileFilter, report: IndexReport, progress: IndexProgress
    ) -> list[str]:
        progress.phase = "listing"
        deadline = time.monotonic() + self.limits.max_walk_seconds
        rel_paths = []
        walk = walk_files(
            root, file_filter, self.access, deadline, report.skipped, progress.check, self.path_rules
        )
        for rel in walk:
            rel_paths.append(rel)
            progress.num_files_listed = len(rel_paths)
            if len(rel_paths) > self.limits.max_files:
                raise InvalidParameterError(
                    "path",
                    f"{root} has more than {self.limits.max_files} files to index: narrow it with `include`/`exclude`",
                )
        return rel_paths

    def _read_changes(
        self,
        root: Path,
        rel_paths: list[str],
        before: dict[str, bytes],
        chunking: ChunkingConfig,
        report: IndexReport,
        progress: IndexProgress,
    ) -> tuple[set[str], list[FileUpdate]]:
        """(the files kept, the updates of the changed ones): unchanged files cost a hash."""
        progress.phase = "reading"
        kept: set[str] = set()
        updates: list[FileUpdate] = []
        for source in iter_sources(root, rel_paths, self.limits.max_file_bytes, self.access, self.path_rules):
            progress.check()
            progress.num_files_read += 1
            if isinstance(source, SkippedFile):
                report.skipped.append(source)
                continue
            if (secret := secret_reason(source.data)) is not None:  # also in files indexed before
                report.skipped.append(SkippedFile(source.path, secret))
                continue
            digest = content_hash(source.data)
            if before.get(source.path) == digest:
                kept.add(source.path)
                continue
            text, why_not = read_text(source.data, self.limits.max_file_bytes)
            if text is None:
                report.skipped.append(SkippedFile(source.path, why_not or "unreadable"))
                continue
            chunks = chunk_lines(text, chunking)
            hashes = [text_hash(chunk_embedding_text(source.path, c)) for c in chunks]
            updates.append(FileUpdate(source.path, digest, chunks, hashes))
            kept.add(source.path)
        return kept, updates

    def _index(
        self,
        root: Path,
        repo: str,
        file_filter: FileFilter,
        chunking: ChunkingConfig,
        allow_removal: bool,
        progress: IndexProgress,
    ) -> IndexReport:
        start = time.perf_counter()
        report = IndexReport(self.access.display(repo))
        rel_paths = self._list_files(root, file_filter, report, progress)
        # Vectors of another model are not comparable: a repo indexed with one is indexed anew.
        same_model = self.store.repo_model(repo) in (None, self.model_name)
        before = self.store.file_hashes(repo) if same_model else {}
        kept, updates = self._read_changes(root, rel_paths, before, chunking, report, progress)
        if not kept and not before:
            reasons = (
                "; ".join(f"{s.path}: {s.reason}" for s in report.skipped[:5])
                or "no file matched the filters"
            )
            raise InvalidParameterError("path", f"nothing to index under {root}: {reasons}")
        removed = sorted(set(before) - kept)
        num_added = sum(1 for u in updates if u.path not in before)
        if len(removed) > num_added and not allow_removal:
            raise InvalidParameterError(
                "allow_removal",
                f"this re-index would drop {len(removed)} indexed files of {report.repo} and add {num_added} "
                f"(e.g. {', '.join(removed[:3])}): send allow_removal=true (--allow-removal) if that is meant",
            )
        report.num_chunks_embedded, report.num_chunks_cached = self._embed_chunks(updates, progress)
        progress.check()  # the last one: past it the swap runs whole
        progress.phase = "writing"
        self.store.replace_files(repo, self.model_name, updates, removed)
        report.num_files = len(kept)
        report.num_files_changed = len(updates)
        report.num_files_unchanged = len(kept) - len(updates)
        report.num_files_removed = len(removed)
        report.num_chunks = self.store.num_chunks(repo)
        report.seconds = time.perf_counter() - start
        progress.phase = "finished"
        return report

    def _embed_chunks(self, updates: list[FileUpdate], progress: IndexProgress) -> tuple[int, int]:
        """(embedded, cached) chunk counts; embeds and stores each missing text once."""
        texts: dict[bytes, str] = {}
        for u in updates:
            for chunk, key in zip(u.chunks, u.text_hashes, strict=True):
                texts.setdefault(key, chunk_embedding_text(u.path, chunk))
        cached = self.store.get_vectors(self.model_name, list(texts))
        missing = [k for k in texts if k not in cached]
        progress.phase = "embedding"
        progress.num_chunks_to_embed = len(missing)
        for start in range(0, len(missing), EMBED_BATCH):
            progress.check()
            keys = missing[start : start + EMBED_BATCH]
            vectors = self._encode([texts[k] for k in keys])
            self.store.put_vectors(self.model_name, list(zip(keys, vectors, strict=True)), time.time())
            progress.num_chunks_embedded += len(keys)
        num_chunks = sum(len(u.chunks) for u in updates)
        self.counters.count(num_chunks - len(missing), len(missing))
        return len(missing), num_chunks - len(missing)

    # search

    def _load_vectors(self, repo: str) -> tuple[np.ndarray, np.ndarray]:
        return self.store.repo_vectors(repo, self.model_name, self.embedder.dim)

    def search(
        self, query: str, top_k: int = 5, repo: str | None = None, mode: str = "hybrid"
    ) -> list[SearchHit]:
        """The `top_k` chunks best matching `query`, best first, over one indexed repo or all of
        them. `mode`: "hybrid" (the dense and full-text rankings fused, `fusion.py`) or "dense"
        (cosine similarity alone)."""
        if not 1 <= top_k <= self.limits.max_top_k:
            raise InvalidParameterError(
                "top_k", f"top_k must be from 1 to {self.limits.max_top_k} (got {top_k})"
            )
        if mode not in SEARCH_MODES:
            raise InvalidParameterError(
                "mode", f"mode must be one of {', '.join(SEARCH_MODES)} (got {mode!r})"
            )
        repos = self._search_repos(repo)
        query_vector = self.embed([query], param="query").vectors[0]
        ranked: list[tuple[str, int, float, float | None]]
        if mode == "dense":
            ranked = [(name, c, score, None) for score, name, c in self._dense(repos, query_vector, top_k)]
        else:
            ranked = self._hybrid(repos, query, query_vector, top_k)
        chunks = self.store.chunks_by_id([c for _, c, _, _ in ranked])
        return [
            SearchHit(
                self.access.display(name),
                chunks[c].path,
                chunks[c].start_line,
                chunks[c].end_line,
                score,
                chunks[c].text,
                fused,
            )
            for name, c, score, fused in ranked
            if c in chunks  # a concurrent re-index may have replaced it since the index was built
        ]

    def _search_repos(self, repo: str | None) -> list[str]:
        """The repos a search reads: `repo` (checked: inside a root and indexed), else all visible."""
        repos = self._visible_repos()
        if repo is None:
            return repos
        wanted = str(self.resolve_path(repo, "repo", to_index=False))  # reads the index, not files
        if wanted not in repos:
            raise InvalidParameterError(
                "repo", f"{repo} is not indexed: POST /precache/repo (or `kvspill rag index`) first"
            )
        return [wanted]

    def _dense(self, repos: list[str], query_vector: np.ndarray, depth: int) -> list[tuple[float, str, int]]:
        """(cosine, repo, chunk id) of the `depth` nearest chunks over `repos`, best first."""
        scored = [
            (score, name, chunk_id)
            for name in repos
            for chunk_id, score in self.indexes.get(name).search(query_vector, depth)
        ]
        scored.sort(key=lambda s: -s[0])
        return scored[:depth]

    def _hybrid(
        self, repos: list[str], query: str, query_vector: np.ndarray, top_k: int
    ) -> list[tuple[str, int, float, float | None]]:
        """(repo, chunk id, cosine, fused score) of the `top_k` best chunks by reciprocal rank
        fusion of the dense ranking and the full-text (bm25) one, each read CANDIDATES deep."""
        depth = max(top_k, CANDIDATES)
        dense = self._dense(repos, query_vector, depth)
        match = match_expression(query)
        lexical = self.store.lexical_search(repos, match, depth) if match else []
        repo_of = {c: name for _, name, c in dense} | dict(lexical)
        cosine = {c: score for score, _, c in dense}
        rankings = [[c for _, _, c in dense], [c for c, _ in lexical]]
        fused = reciprocal_rank_fusion(rankings, depth=depth)[:top_k]
        for name in {repo_of[c] for c, _ in fused if c not in cosine}:  # found by full text only
            wanted = [c for c, _ in fused if c not in cosine and repo_of[c] == name]
            cosine |= self.indexes.get(name).scores_of(wanted, query_vector)
        return [(repo_of[c], c, cosine[c], f) for c, f in fused if c in cosine]

    def _visible_repos(self) -> list[str]:
        """The indexed repos of this model under the access policy's roots (the database may be
        shared with servers and CLIs of other roots: theirs stay unseen)."""
        return [r for r in self.store.repos(self.model_name) if self.access.root_of(Path(r)) is not None]

    # stats

    def stats(self) -> dict[str, object]:
        """The cache's counters; repos, files and chunks of the visible repos only, named as
        clients see them (`db_path` only where paths show absolute: the CLI)."""
        repos = self._visible_repos()
        counts = self.store.counts(repos)
        c = self.counters
        lookups = c.hits + c.misses
        return {
            "model": self.model_name,
            "dim": self.embedder.dim,
            **({"db_path": str(self.store.path)} if self.access.shows_absolute_paths else {}),
            "entries": counts["entries"],
            "bytes": counts["file_bytes"],
            "vector_bytes": counts["vector_bytes"],
            "repos": len(repos),
            "files": counts["files"],
            "chunks": counts["chunks"],
            "hits": c.hits,
            "misses": c.misses,
            "hit_rate": c.hits / lookups if lookups else None,
            "embedded": c.num_embedded,
            "embeddings_per_s": c.num_embedded / c.embed_seconds if c.embed_seconds > 0 else None,
            "indexes": {
                self.access.display(r): kind for r, kind in self.indexes.kinds().items() if r in repos
            },
        }
