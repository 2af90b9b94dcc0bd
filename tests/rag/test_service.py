"""RagService: incremental re-indexing with the real model, restarts, bad inputs, concurrency."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kvspill.errors import ForbiddenPathError, InvalidParameterError
from kvspill.rag.files import FileFilter
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.rag.types import ChunkingConfig, RagLimits

from .conftest import FakeEmbedder, numbered_lines, write_repo

CHUNKING = ChunkingConfig(chunk_lines=10, overlap_lines=2)


def _repo(service: RagService) -> Path:
    return write_repo(
        service.allowed_root / "proj",
        {
            "alpha.py": numbered_lines("alpha", 30),
            "beta.py": numbered_lines("beta", 30),
            "docs/gamma.md": numbered_lines("gamma", 12),
            "image.png": b"\x89PNG\r\n\x1a\n\0\0\0binary",
        },
    )


def test_reindex_embeds_only_what_changed(real_service: RagService) -> None:
    repo = _repo(real_service)
    first = real_service.precache_repo("proj", chunking=CHUNKING)
    assert (first.num_files, first.num_files_changed) == (3, 3)
    assert first.num_chunks_embedded == first.num_chunks == 4 + 4 + 2
    assert [s.path for s in first.skipped] == ["image.png"]

    again = real_service.precache_repo(str(repo), chunking=CHUNKING)
    assert (again.num_files_unchanged, again.num_chunks_embedded, again.num_files_changed) == (3, 0, 0)

    lines = (repo / "beta.py").read_text().splitlines()
    lines[25] = "beta changed: totally_new_code = rewrite()"
    (repo / "beta.py").write_text("\n".join(lines) + "\n")
    changed = real_service.precache_repo("proj", chunking=CHUNKING)
    assert changed.num_files_changed == 1 and changed.num_files_unchanged == 2
    # line 26 lies in beta's chunks 3 (17-26) and 4 (25-30) only; its other chunks are cached
    assert changed.num_chunks_embedded == 2 and changed.num_chunks_cached == 2
    hits = real_service.search("totally_new_code = rewrite()", top_k=1)
    assert (hits[0].path, hits[0].start_line) in {("beta.py", 17), ("beta.py", 25)}

    (repo / "alpha.py").unlink()
    with pytest.raises(InvalidParameterError, match="drop 1 indexed files of proj and add 0"):
        real_service.precache_repo("proj", chunking=CHUNKING)
    removed = real_service.precache_repo("proj", chunking=CHUNKING, allow_removal=True)
    assert removed.num_files_removed == 1 and removed.num_chunks_embedded == 0
    assert removed.num_chunks == 4 + 2
    assert all(h.path != "alpha.py" for h in real_service.search("alpha line", top_k=10))


def test_cache_and_index_survive_a_restart(real_service: RagService, embedder: object) -> None:
    _repo(real_service)
    real_service.precache_repo("proj", FileFilter(include=("*.py",)), CHUNKING)
    before = real_service.search("beta line 12", top_k=3)
    restarted = RagService(embedder, EmbeddingStore(real_service.store.path), real_service.allowed_root)  # type: ignore[arg-type]
    assert restarted.precache_repo("proj", FileFilter(include=("*.py",)), CHUNKING).num_chunks_embedded == 0
    assert restarted.search("beta line 12", top_k=3) == before
    result = restarted.embed(["beta line 12", "something new"])
    assert result.cached == [True, False]  # the first was the query embedded before the restart


@pytest.mark.parametrize(
    "path",
    ["..", "/", "../outside", "proj/../../outside", "link_out"],
)
def test_paths_outside_the_root_are_refused(fake_service: RagService, path: str) -> None:
    outside = fake_service.allowed_root.parent / "outside"
    write_repo(outside, {"x.py": "x = 1\n"})
    (fake_service.allowed_root / "link_out").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ForbiddenPathError, match="outside the directories this server may index") as e:
        fake_service.precache_repo(path)
    assert e.value.param == "path"


def test_bad_inputs_say_what_to_change(fake_service: RagService) -> None:
    root = fake_service.allowed_root
    write_repo(root / "latin1", {"a.txt": b"caf\xe9 cr\xe8me\n", "empty.txt": ""})
    with pytest.raises(InvalidParameterError, match=r"nothing to index.*a.txt: not UTF-8"):
        fake_service.precache_repo("latin1")
    (root / "file.txt").write_text("x")
    with pytest.raises(InvalidParameterError, match="is a file"):
        fake_service.precache_repo("file.txt")
    with pytest.raises(InvalidParameterError, match="is missing"):
        fake_service.precache_repo("nope")
    with pytest.raises(InvalidParameterError, match="empty"):
        fake_service.embed([])
    with pytest.raises(InvalidParameterError, match="input 1 is empty"):
        fake_service.embed(["ok", "  "])
    small = RagService(FakeEmbedder(), fake_service.store, root, RagLimits(max_input_chars=10, max_inputs=3))
    with pytest.raises(InvalidParameterError, match="input 0 has 11 characters; at most 10"):
        small.embed(["x" * 11])
    with pytest.raises(InvalidParameterError, match="4 inputs in one request; send at most 3"):
        small.embed(["a", "b", "c", "d"])
    with pytest.raises(InvalidParameterError, match="top_k"):
        fake_service.search("q", top_k=0)
    write_repo(root / "ok", {"a.py": "a = 1\n"})
    with pytest.raises(InvalidParameterError, match="not indexed"):
        fake_service.search("q", repo="ok")
    with pytest.raises(InvalidParameterError, match="outside the vocabulary"):
        fake_service.embed_token_ids([[1, 2, 100]])


def test_concurrent_embeds_and_indexing(fake_service: RagService) -> None:
    root = fake_service.allowed_root
    for r in range(3):
        write_repo(root / f"r{r}", {f"f{i}.py": numbered_lines(f"r{r}f{i}", 40) for i in range(5)})
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            fake_service.precache_repo(f"r{i % 3}")
            fake_service.embed([f"text {i}", "shared text"])
            fake_service.search("r1f2 line 7", top_k=3)
        except BaseException as e:  # collected for the assert below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    embedded = fake_service.embedder.embedded  # type: ignore[attr-defined]
    # Each chunk text once, however many threads indexed its repo; "shared text" at most a few
    # times (two threads may both miss before either writes), each "text i" once.
    chunk_texts = [t for t in embedded if t.startswith("f")]
    assert len(chunk_texts) == len(set(chunk_texts))
    assert fake_service.stats()["chunks"] == 3 * 5 * 3  # 40 lines: chunks at 1, 16, 31
    assert fake_service.stats()["misses"] == len(embedded)
