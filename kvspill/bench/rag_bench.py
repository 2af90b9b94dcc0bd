"""RAG indexing speed on the CPU: chunks/s on a first index, a no-change re-index and a
one-file change of a real tree, beside sentence-transformers' `encode` on the same chunks.

    python -m kvspill.bench.rag_bench [--tree DIR ...] [--threads N] [--out FILE]

The trees (default: the email and json packages of this Python's standard library) are
copied into a temporary directory and indexed into a fresh SQLite cache with the default
chunking (20 lines, 5 overlap). The reference encodes the very texts the model read (path line
plus chunk), batch size 32, after one warm-up batch; kvspill's embedder encodes them again
alone (model time only, no walk, hashing or SQLite) so the pipeline's overhead shows too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _default_trees() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [str(stdlib / name) for name in ("email", "json")]


def _timed_encode(encode: object, texts: list[str]) -> tuple[np.ndarray, float]:
    encode(texts[:32])  # type: ignore[operator]  # warm-up: first-call allocations
    start = time.perf_counter()
    vectors = encode(texts)  # type: ignore[operator]
    return np.asarray(vectors), time.perf_counter() - start


def _index_runs(service: object, repo: Path) -> dict[str, object]:
    from kvspill.rag.files import FileFilter

    only_py = FileFilter(include=("*.py",))
    first = service.precache_repo(str(repo), only_py)  # type: ignore[attr-defined]
    again = service.precache_repo(str(repo), only_py)  # type: ignore[attr-defined]
    victim = sorted(repo.rglob("*.py"))[0]
    victim.write_text(victim.read_text() + "\n# one more line\n")
    changed = service.precache_repo(str(repo), only_py)  # type: ignore[attr-defined]
    return {
        "files": first.num_files,
        "chunks": first.num_chunks,
        "first_index": {
            "seconds": round(first.seconds, 3),
            "chunks_embedded": first.num_chunks_embedded,
            "chunks_per_s": round(first.num_chunks_embedded / first.seconds, 2),
        },
        "no_change_reindex": {
            "seconds": round(again.seconds, 4),
            "chunks_embedded": again.num_chunks_embedded,
            "chunks_per_s": round(again.num_chunks / again.seconds, 1),
        },
        "one_file_changed": {
            "file": victim.relative_to(repo).as_posix(),
            "seconds": round(changed.seconds, 3),
            "chunks_embedded": changed.num_chunks_embedded,
            "chunks_cached": changed.num_chunks_cached,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", help="directory to index (repeatable)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", default=None, help="append the JSON result to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    from kvspill.rag.model import load_embedder, packaged_model_dir
    from kvspill.rag.service import RagService
    from kvspill.rag.store import EmbeddingStore

    load_before = os.getloadavg()
    embedder = load_embedder()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "tree"
        for tree in args.tree or _default_trees():
            shutil.copytree(tree, repo / Path(tree).name, ignore=shutil.ignore_patterns("__pycache__"))
        store = EmbeddingStore(Path(tmp) / "rag.sqlite3")
        service = RagService(embedder, store, Path(tmp))
        result = _index_runs(service, repo)
        rows = store._db().execute("SELECT c.path, c.text FROM chunks c ORDER BY c.chunk_id").fetchall()
    from kvspill.rag.chunker import chunk_embedding_text
    from kvspill.rag.types import Chunk

    texts = [chunk_embedding_text(path, Chunk(0, 0, text)) for path, text in rows]
    ours, ours_s = _timed_encode(embedder.encode, texts)
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(packaged_model_dir()), device="cpu", local_files_only=True)
    theirs, theirs_s = _timed_encode(
        lambda t: reference.encode(t, batch_size=32, convert_to_numpy=True), texts
    )
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    result |= {
        "kvspill_encode_chunks_per_s": round(len(texts) / ours_s, 2),
        "sentence_transformers_encode_chunks_per_s": round(len(texts) / theirs_s, 2),
        "min_cosine_vs_sentence_transformers": round(float(cosine.min()), 6),
        "mean_tokens_per_chunk": round(float(np.mean(embedder.count_tokens(texts))), 1),
    }
    record = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m kvspill.bench.rag_bench "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpu": platform.machine(),
        "num_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "model": embedder.name,
        "trees": [Path(t).name for t in (args.tree or _default_trees())],
        **result,
    }
    line = json.dumps(record)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
