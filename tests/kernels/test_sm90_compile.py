"""Every kernel of the package compiles for sm_90 on this host (sm90_compile.py, in a process
without Triton's interpreter): the front end's rules that the interpreted kernel tests never meet."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_every_kernel_compiles_for_sm90():
    if importlib.util.find_spec("triton.backends.nvidia") is None:
        pytest.skip("this triton has no CUDA backend")
    script = Path(__file__).with_name("sm90_compile.py")
    tree = str(script.parents[2])  # this checkout's kvspill, not whichever the environment installed
    env = dict(
        os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "kernels compiled" in done.stdout, done.stdout
