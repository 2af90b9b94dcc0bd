"""docs/flags.md is generated from the command line (kvspill/cli/flags_doc.py) and kept current."""

from __future__ import annotations

from pathlib import Path

from kvspill.cli.flags_doc import render
from kvspill.cli.main import _register_commands, app

FLAGS_MD = Path(__file__).resolve().parents[2] / "docs" / "flags.md"


def test_flags_md_is_current() -> None:
    _register_commands()
    text = render(app)
    assert FLAGS_MD.read_text() == text, (
        "docs/flags.md is stale: run `python -m kvspill.cli.flags_doc > docs/flags.md`"
    )
    for flag in ("`--vram-budget`", "`--rag-root`", "`--api-key`", "`--kv-cache-dtype`"):
        assert flag in text
    assert "## `kvspill serve MODEL`" in text and "## Engine options" in text
