"""kvspill: long-context LLM inference on the GPU you have.

`from kvspill import LLM, SamplingParams`. Importing the package loads nothing heavy: `LLM`
(and torch with it) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvspill.sampling_params import SamplingParams

if TYPE_CHECKING:
    from kvspill.llm import LLM

__all__ = ["LLM", "SamplingParams", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from kvspill.llm import LLM

        return LLM
    raise AttributeError(name)
