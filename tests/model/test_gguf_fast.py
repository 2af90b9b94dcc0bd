"""FastGGUFReader gives exactly what gguf's own GGUFReader gives (kvspill/gguf/fast.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGUFEndian, GGUFValueType

from kvspill.gguf.fast import FastGGUFReader

_SCALARS = [
    (GGUFValueType.UINT8, 200),
    (GGUFValueType.INT8, -100),
    (GGUFValueType.UINT16, 60000),
    (GGUFValueType.INT16, -30000),
    (GGUFValueType.UINT32, 4_000_000_000),
    (GGUFValueType.INT32, -2_000_000_000),
    (GGUFValueType.FLOAT32, 1.5),
    (GGUFValueType.UINT64, 2**63 + 5),
    (GGUFValueType.INT64, -(2**62)),
    (GGUFValueType.FLOAT64, -2.25),
    (GGUFValueType.BOOL, True),
]


def _write(path: Path, endianess: GGUFEndian) -> Path:
    w = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
    w.add_string("test.string", "héllo ✓")
    w.add_string("test.empty_string", "")
    for vtype, value in _SCALARS:
        w.add_key_value(f"test.scalar.{vtype.name}", value, vtype)
        w.add_key_value(f"test.array.{vtype.name}", [value] * 3, GGUFValueType.ARRAY, sub_type=vtype)
    w.add_array("test.strings", ["a", "", "ünïcode", "x" * 300])
    w.add_array("test.nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("test.nested_strings", [["a", "bc"], ["d"]])
    w.add_tensor("token_embd.weight", np.arange(64 * 4, dtype=np.float32).reshape(4, 64))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float16))
    q8 = gguf.quants.quantize(
        np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 64), gguf.GGMLQuantizationType.Q8_0
    )
    w.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _same_part(ours: Any, theirs: Any, where: str) -> None:
    assert ours.dtype == theirs.dtype, where
    assert ours.shape == theirs.shape, where
    assert ours.tobytes() == theirs.tobytes(), where


def assert_same_reader(ours: FastGGUFReader, theirs: gguf.GGUFReader, contents: bool = True) -> None:
    """Every field (offset, name, types, data, each part, contents) and tensor equal. `contents()` is
    gguf's own code over those parts (compared only where asked: 49K strings take seconds)."""
    assert list(ours.fields) == list(theirs.fields)
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.name, mine.types, list(mine.data)) == (
            field.offset, field.name, field.types, list(field.data)
        ), name  # fmt: skip
        assert len(mine.parts) == len(field.parts), name
        for i, (a, b) in enumerate(zip(mine.parts, field.parts, strict=True)):
            _same_part(a, b, f"{name} part {i}")
        assert not contents or mine.contents() == field.contents(), name
    assert ours.data_offset == theirs.data_offset and ours.alignment == theirs.alignment
    assert len(ours.tensors) == len(theirs.tensors)
    for mine_t, t in zip(ours.tensors, theirs.tensors, strict=True):
        assert (mine_t.name, mine_t.tensor_type, mine_t.n_elements, mine_t.n_bytes, mine_t.data_offset) == (
            t.name, t.tensor_type, t.n_elements, t.n_bytes, t.data_offset
        )  # fmt: skip
        assert mine_t.shape.tolist() == t.shape.tolist()
        _same_part(mine_t.data, t.data, t.name)


@pytest.mark.parametrize("endianess", [GGUFEndian.LITTLE, GGUFEndian.BIG])
def test_every_value_type_and_nested_arrays_match_gguf(tmp_path, endianess) -> None:
    path = _write(tmp_path / "all.gguf", endianess)
    ours, theirs = FastGGUFReader(path), gguf.GGUFReader(path)
    assert_same_reader(ours, theirs)
    assert ours.fields["test.strings"].contents() == ["a", "", "ünïcode", "x" * 300]
    assert ours.fields["test.nested"].contents() == theirs.fields["test.nested"].contents()
    assert ours.fields["test.array.INT16"].contents(1) == -30000


def test_lazy_parts_behave_like_a_list(tmp_path) -> None:
    path = _write(tmp_path / "all.gguf", GGUFEndian.LITTLE)
    parts = FastGGUFReader(path).fields["test.strings"].parts
    expected = gguf.GGUFReader(path).fields["test.strings"].parts
    assert len(parts) == len(expected) == 5 + 2 * 4
    assert bytes(parts[-1]) == b"x" * 300 and int(parts[-2][0]) == 300
    assert [bytes(p) for p in parts[5::2]] == [bytes(p) for p in expected[5::2]]
    with pytest.raises(IndexError):
        parts[len(parts)]


def test_a_string_past_the_end_of_the_file_is_an_error(tmp_path) -> None:
    path = _write(tmp_path / "all.gguf", GGUFEndian.LITTLE)
    data = bytearray(path.read_bytes())
    field = gguf.GGUFReader(path).fields["test.strings"]
    length_at = int(field.offset) + len(field.parts[0].tobytes() + field.parts[1].tobytes()) + 4 + 4 + 8
    data[length_at : length_at + 8] = (10**12).to_bytes(8, "little")  # string 0 "a" now claims 1 TB
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="test.strings.*past the end"):
        FastGGUFReader(broken)


@pytest.mark.slow
def test_the_embedded_smollm2_file_matches_gguf(smollm2_gguf_path) -> None:
    ours = FastGGUFReader(smollm2_gguf_path)
    assert_same_reader(ours, gguf.GGUFReader(smollm2_gguf_path), contents=False)
    assert ours.fields["tokenizer.ggml.tokens"].contents(0) == "<|endoftext|>"
