"""A GGUF file with tensors in a type kvspill cannot read (Q8_1, I8, F64: gguf has no dequantizer
for them) is refused when the model is resolved, in one line naming the type and what to do, on
the dequantized path as on the kept-quantized one, and before the memory plan; never gguf's
NotImplementedError from the middle of the weight load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

from kvspill.errors import UnsupportedModelError
from kvspill.gguf.header import readable_type_names
from kvspill.model.resolve import resolve_model


def _with_tensor(path: Path, data: np.ndarray, raw_dtype: Any = None) -> Path:
    def add(w: Any) -> None:
        w.add_tensor("blk.0.attn_q.weight", data, raw_dtype=raw_dtype)

    return write_tiny_gguf(path, add_more=add)


def _q8_1(path: Path) -> Path:
    from gguf import GGMLQuantizationType

    return _with_tensor(path, np.zeros((32, 40), np.uint8), GGMLQuantizationType.Q8_1)  # 32 x 32 values


CASES = {
    "Q8_1": _q8_1,
    "I8": lambda path: _with_tensor(path, np.zeros((32, 32), np.int8)),
    "F64": lambda path: _with_tensor(path, np.zeros((32, 32), np.float64)),
}


@pytest.mark.parametrize("qtype", sorted(CASES))
def test_resolving_refuses_the_type_in_one_line(tmp_path: Path, qtype: str) -> None:
    path = CASES[qtype](tmp_path / f"{qtype}.gguf")
    with pytest.raises(UnsupportedModelError) as e:
        resolve_model(str(path))
    message = str(e.value)
    assert f"GGUF type {qtype} (1, e.g. 'blk.0.attn_q.weight')" in message and "\n" not in message
    assert "Use a GGUF file quantized to one of these" in message and "Q4_K" in message


def test_the_readable_types() -> None:
    names = readable_type_names()
    assert {"F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q3_K", "IQ4_XS"} <= set(names)
    assert not {"Q8_1", "Q8_K", "I8", "I32", "F64"} & set(names)


def test_a_file_of_readable_types_resolves(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType

    path = _with_tensor(tmp_path / "q8_0.gguf", np.zeros((32, 34), np.uint8), GGMLQuantizationType.Q8_0)
    assert resolve_model(str(path)).kind == "gguf"


@pytest.mark.parametrize("quantization", [None, "gguf"])
def test_llm_refuses_it_before_the_memory_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quantization: str | None
) -> None:
    from kvspill.engine import setup
    from kvspill.llm import LLM

    def planned(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the memory plan ran before the type was checked")

    monkeypatch.setattr(setup, "_plan", planned)
    path = _q8_1(tmp_path / "q8_1.gguf")
    with pytest.raises(UnsupportedModelError, match="GGUF type Q8_1"):
        LLM(str(path), device="cpu", **({"quantization": quantization} if quantization else {}))
