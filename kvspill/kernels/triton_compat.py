"""Import Triton when it is installed and can run; otherwise stand-ins that keep the kernel modules
importable.

A CPU-only install (`pip install kvspill` without the `triton` extra) runs the torch references
and never launches a kernel, but the kernel files define their `@triton.jit` functions at import.
Here `triton.jit` then returns a function that raises with the fix, and `tl` resolves only the
names annotations need.

Triton installed next to a CPU-only torch build (no CUDA, no ROCm) cannot launch a kernel either,
unless TRITON_INTERPRET=1 runs them in Triton's interpreter (the tests do). There `triton` is
imported on first use instead of here: loading libtriton is 0.2-0.4 s of a 2-core CPU start
(issue 50). `triton.jit` keeps the function and raises at launch; any other name (`triton.cdiv`,
`tl.float32`) imports Triton then. Module-level `tl.constexpr(v)` values stay plain `v`: no kernel
compiles in this mode. Everywhere else this module is exactly `import triton`.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
from collections.abc import Callable
from typing import Any


def _cannot_launch() -> bool:
    """Triton is installed, but this torch build has no GPU backend and the interpreter is off."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    import torch  # every kernel module imports it too

    return torch.version.cuda is None and torch.version.hip is None


class _MissingKernel:
    def __init__(self, fn: Callable[..., Any], why: str) -> None:
        self.__name__ = getattr(fn, "__name__", "kernel")
        self._why = why

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        raise ImportError(f"the Triton kernel {self.__name__} {self._why}")


class _TritonStandIn:
    """`triton` where no kernel can launch: `jit` keeps stand-ins; other names from Triton if any."""

    def __init__(self, why: str, installed: bool) -> None:
        self._why, self._installed = why, installed

    def jit(self, fn: Callable[..., Any] | None = None, **_: Any) -> Any:
        if fn is None:
            return lambda f: _MissingKernel(f, self._why)
        return _MissingKernel(fn, self._why)

    def __getattr__(self, name: str) -> Any:
        if self._installed:
            return getattr(importlib.import_module("triton"), name)
        if name == "__version__":
            return "absent"
        if name == "cdiv":
            return lambda a, b: -(-a // b)
        if name == "next_power_of_2":
            return lambda n: 1 if n <= 1 else 2 ** math.ceil(math.log2(n))
        raise AttributeError(f"triton.{name}: the triton package is not installed")


class _LanguageStandIn:
    def __init__(self, installed: bool) -> None:
        self._installed = installed

    def __getattr__(self, name: str) -> Any:
        if name == "constexpr":  # annotations, and module-level constants: no kernel compiles here
            return lambda value=None: value
        if self._installed:
            return getattr(importlib.import_module("triton.language"), name)
        return object  # only ever used in annotations


_NOT_INSTALLED = "needs the triton package: pip install 'kvspill[triton]' (on the CPU the engine uses torch references instead)"
_CPU_TORCH = (
    "needs a CUDA or ROCm build of torch (this one is CPU-only): the CPU engine uses torch references; "
    "set TRITON_INTERPRET=1 to run the kernel in Triton's interpreter"
)

# The SMs a grid is sized for where kernels run in Triton's interpreter (CPU tensors): small, so
# the tests' grids take the same branches (splits, several tiles a program) as a GPU's.
INTERPRETER_SMS = 4


def num_sms(device: Any) -> int:
    """Streaming multiprocessors of `device` (a torch.device) for sizing a grid; INTERPRETER_SMS
    off CUDA."""
    import torch

    return (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else INTERPRETER_SMS
    )


triton: Any
tl: Any
if importlib.util.find_spec("triton") is not None and _cannot_launch():
    HAS_TRITON = True
    triton, tl = _TritonStandIn(_CPU_TORCH, installed=True), _LanguageStandIn(installed=True)
else:
    try:
        triton, tl = importlib.import_module("triton"), importlib.import_module("triton.language")
        HAS_TRITON = True
    except ImportError:  # CPU-only install
        HAS_TRITON = False
        # mypy sees triton as Any (no type information: see [tool.mypy] in pyproject.toml).
        triton, tl = _TritonStandIn(_NOT_INSTALLED, installed=False), _LanguageStandIn(installed=False)

__all__ = ["HAS_TRITON", "INTERPRETER_SMS", "num_sms", "tl", "triton"]
