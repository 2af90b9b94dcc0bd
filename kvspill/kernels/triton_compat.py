"""Import Triton when it is installed; otherwise stand-ins that keep the kernel modules importable.

A CPU-only install (`pip install kvspill` without the `triton` extra) runs the torch references
and never launches a kernel, but the kernel files define their `@triton.jit` functions at import.
Here `triton.jit` then returns a function that raises with the fix, and `tl` resolves only the
names annotations need. With Triton present this module is exactly `import triton`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # CPU-only install
    HAS_TRITON = False

    class _MissingKernel:
        def __init__(self, fn: Callable[..., Any]) -> None:
            self.__name__ = getattr(fn, "__name__", "kernel")

        def __getitem__(self, grid: Any) -> Callable[..., Any]:
            raise ImportError(
                f"the Triton kernel {self.__name__} needs the triton package: "
                "pip install 'kvspill[triton]' (on the CPU the engine uses torch references instead)"
            )

    class _TritonStandIn:
        __version__ = "absent"

        @staticmethod
        def jit(fn: Callable[..., Any] | None = None, **_: Any) -> Any:
            return _MissingKernel(fn) if fn is not None else _MissingKernel

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))

    class _LanguageStandIn:
        def __getattr__(self, name: str) -> Any:
            return object  # only ever used in annotations such as `tl.constexpr`

    # mypy sees triton as Any (no type information: see [tool.mypy] in pyproject.toml).
    triton = _TritonStandIn()
    tl = _LanguageStandIn()

__all__ = ["HAS_TRITON", "tl", "triton"]
