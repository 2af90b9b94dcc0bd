"""Line chunking and the file walk (.gitignore, globs, unreadable files): no model."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvspill.rag.chunker import chunk_lines
from kvspill.rag.files import FileFilter, SourceFile, iter_sources, read_text, walk_files
from kvspill.rag.types import ChunkingConfig

from .conftest import write_repo


@pytest.mark.parametrize("num_lines", [1, 4, 5, 6, 9, 10, 11, 23])
def test_chunks_cover_every_line_with_overlap(num_lines: int) -> None:
    text = "\n".join(f"line {i}" for i in range(1, num_lines + 1))
    chunks = chunk_lines(text, ChunkingConfig(chunk_lines=5, overlap_lines=2))
    covered = set()
    for chunk in chunks:
        lines = chunk.text.split("\n")
        assert lines == [f"line {i}" for i in range(chunk.start_line, chunk.end_line + 1)]
        assert len(lines) <= 5
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    assert covered == set(range(1, num_lines + 1))
    starts = [c.start_line for c in chunks]
    assert starts == list(range(1, 3 * len(chunks), 3))  # step = 5 - 2
    assert chunks[-1].end_line == num_lines


def test_blank_chunks_are_dropped_and_configs_validated() -> None:
    text = "a\n" + "\n" * 12 + "b"
    chunks = chunk_lines(text, ChunkingConfig(chunk_lines=4, overlap_lines=0))
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 4), (13, 14)]
    with pytest.raises(ValueError, match="overlap_lines"):
        ChunkingConfig(chunk_lines=4, overlap_lines=4)
    with pytest.raises(ValueError, match="chunk_lines"):
        ChunkingConfig(chunk_lines=0)


def test_walk_honours_nested_gitignore_and_globs(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {
            ".gitignore": "build/\n*.log\n",
            "a.py": "x",
            "notes.md": "x",
            "run.log": "x",
            "build/gen.py": "x",
            "pkg/.gitignore": "secret_*.py\n!secret_ok.py\n",
            "pkg/mod.py": "x",
            "pkg/secret_key.py": "x",
            "pkg/secret_ok.py": "x",
            "pkg/tests/test_mod.py": "x",
            ".git/config": "x",
        },
    )
    assert sorted(walk_files(root, FileFilter())) == [
        ".gitignore",
        "a.py",
        "notes.md",
        "pkg/.gitignore",
        "pkg/mod.py",
        "pkg/secret_ok.py",
        "pkg/tests/test_mod.py",
    ]
    only_py = FileFilter(include=("*.py",), exclude=("tests/",))
    assert sorted(walk_files(root, only_py)) == ["a.py", "pkg/mod.py", "pkg/secret_ok.py"]
    no_ignore = FileFilter(include=("*.py",), respect_gitignore=False)
    assert "build/gen.py" in set(walk_files(root, no_ignore))


def test_unreadable_files_get_reasons(tmp_path: Path) -> None:
    assert read_text(b"hello\n", 100) == ("hello\n", None)
    assert read_text(b"  \n", 100)[1] == "empty"
    assert "not UTF-8" in str(read_text(b"caf\xe9\n", 100)[1])
    assert "binary" in str(read_text(b"ab\0cd", 100)[1])
    assert "limit" in str(read_text(b"x" * 101, 100)[1])
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    root = write_repo(tmp_path / "repo", {"big.txt": "x" * 200, "ok.txt": "fine"})
    (root / "link.txt").symlink_to(outside)
    read = list(iter_sources(root, ["big.txt", "ok.txt", "link.txt"], max_bytes=100))
    assert [s.path for s in read if isinstance(s, SourceFile)] == ["ok.txt"]
    reasons = {s.path: s.reason for s in read if not isinstance(s, SourceFile)}
    assert "limit" in reasons["big.txt"] and "outside" in reasons["link.txt"]
