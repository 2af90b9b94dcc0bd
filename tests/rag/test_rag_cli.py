"""`kvspill rag index | search | stats` and `kvspill embed-serve` wiring (model loaded once);
the index's progress line and Ctrl-C."""

from __future__ import annotations

import _thread
import io
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli import rag_cmd
from kvspill.rag.errors import IndexCancelledError
from kvspill.rag.types import IndexProgress

from .conftest import write_repo


def _app() -> typer.Typer:
    app = typer.Typer()
    rag_cmd.register(app)
    rag_cmd.register(app)  # idempotent
    return app


@pytest.fixture
def cli(embedder: Any, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setattr("kvspill.rag.model.load_embedder", lambda *args: embedder)
    return CliRunner()


def test_index_search_stats(cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    repo = write_repo(
        tmp_path / "repo",
        {"k.py": "def kiwi_juice():\n    pass\n", "bad.txt": b"\xff\xfe\n", "l.py": "x = 1\n"},
    )
    db = ["--rag-db", str(tmp_path / "rag.sqlite3")]
    first = cli.invoke(_app(), ["rag", "index", str(repo), *db])
    assert first.exit_code == 0, first.output
    assert "skipped bad.txt: not UTF-8" in first.output
    report = json.loads(first.stdout.strip().splitlines()[-1])
    assert report["num_chunks_embedded"] == 2 and report["num_skipped"] == 1
    again = json.loads(cli.invoke(_app(), ["rag", "index", "repo", *db]).stdout.strip().splitlines()[-1])
    assert again["num_chunks_embedded"] == 0 and again["num_files_unchanged"] == 2
    found = cli.invoke(_app(), ["rag", "search", "kiwi juice", "-k", "1", "--json", *db])
    assert json.loads(found.stdout)["path"] == "k.py"
    stats = json.loads(cli.invoke(_app(), ["rag", "stats", *db]).stdout)
    assert stats["chunks"] == 2 and stats["repos"] == 1


def test_user_errors_exit_2(cli: CliRunner, tmp_path: Path) -> None:
    db = ["--rag-db", str(tmp_path / "rag.sqlite3")]
    missing = cli.invoke(_app(), ["rag", "index", str(tmp_path / "nope"), *db])
    assert missing.exit_code == 2 and "error:" in missing.output
    overlap = cli.invoke(
        _app(), ["rag", "index", str(tmp_path), "--chunk-lines", "3", "--overlap-lines", "3", *db]
    )
    assert overlap.exit_code == 2 and "overlap_lines" in overlap.output
    serve = cli.invoke(_app(), ["embed-serve", "--rag-root", str(tmp_path / "nope"), *db])
    assert serve.exit_code == 2 and "--rag-root" in serve.output


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _slow_index(progress: IndexProgress) -> str:
    progress.phase, progress.num_files_listed, progress.num_files_read = "reading", 40, 12
    time.sleep(2.5 * rag_cmd.PROGRESS_S)
    return "report"


def test_index_progress_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert rag_cmd._index_with_progress(_slow_index) == "report"
    assert "\r\033[Kreading: 12 of 40 files read" in terminal.getvalue()
    pipe = io.StringIO()  # not a terminal: nothing
    monkeypatch.setattr(sys, "stderr", pipe)
    assert rag_cmd._index_with_progress(_slow_index) == "report" and pipe.getvalue() == ""


def test_ctrl_c_cancels_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    # interrupt_main() does nothing where SIGINT is ignored, as in a job a shell started with `&`:
    # give the main thread Python's own handler for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupted(progress: IndexProgress) -> str:
        time.sleep(0.1)
        _thread.interrupt_main()  # Ctrl-C, while the main thread waits for this one
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            progress.check()  # raises once the main thread asked for the cancel
            time.sleep(0.01)
        return "never cancelled"  # fails the test below instead of hanging it

    try:
        with pytest.raises(IndexCancelledError, match="Ctrl-C"):
            rag_cmd._index_with_progress(interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)
