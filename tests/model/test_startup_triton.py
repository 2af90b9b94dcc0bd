"""Triton next to a CPU-only torch is imported on first use, not at start (kernels/triton_compat.py):
loading libtriton is 0.2-0.4 s of a 2-core CPU start (issue 50)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None
    or torch.version.cuda is not None
    or torch.version.hip is not None,
    reason="the lazy import applies where Triton is installed next to a CPU-only torch",
)

SCRIPT = """
import json, sys
import kvspill.engine.core
from kvspill.kernels import fused_ops
from kvspill.kernels.triton_compat import HAS_TRITON, triton
report = {"imported_at_start": "triton" in sys.modules, "has_triton": HAS_TRITON}
try:
    fused_ops._silu_and_mul_kernel[(1,)]
except ImportError as e:
    report["launch"] = str(e)
report["cdiv"] = triton.cdiv(7, 2)  # any other name imports Triton
report["imported_after"] = "triton" in sys.modules
print(json.dumps(report))
"""


def _run(interpret: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_engine_import_loads_no_triton_and_a_launch_says_why() -> None:
    report = _run(None)
    assert report["imported_at_start"] is False
    assert report["has_triton"] is True
    assert "_silu_and_mul_kernel" in report["launch"] and "TRITON_INTERPRET=1" in report["launch"]
    assert report["cdiv"] == 4 and report["imported_after"] is True


def test_the_interpreter_gets_real_triton() -> None:
    report = _run("1")
    assert report["imported_at_start"] is True
    assert "launch" not in report  # a real JIT function: indexing it gives the launcher
