"""A GGUF file's header, read with `struct` alone: its architecture, every tensor's type, and how
many bytes its tensors need, so that before anything loads (`model/resolve.py`) a file cut short
(an interrupted download) is told apart from a file kvspill cannot run.

gguf's reader (and transformers' own) fail on such a file deep inside: a `struct.error` when the
cut is in the header, a numpy reshape error when it is in the tensor data, which read as a bug or
an unsupported model. `read_header` walks the same layout (GGUF v2/v3, either byte order: magic,
version, counts, the key/value fields, the tensor infos, the data aligned to `general.alignment`)
without numpy and without making a value of any field but the two it keeps.

Invariants:
- A header that ends early (or whose lengths run past the end) is a `GGUFHeaderError` naming the
  file's size; nothing else about the values is checked (gguf's reader checks them later).
- `data_end` is the first byte past the last tensor's data, as gguf's reader places the tensors
  (`data_offset` + the tensor's offset + its bytes); None where a tensor's type has no known size.
- Cached per (path, size, mtime): the embedded SmolLM2's header (its 49K-token vocabulary) takes
  about 30 ms to walk, and one start resolves the model several times.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from dataclasses import dataclass

_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
# GGUF value types (gguf.constants.GGUFValueType): the width of each fixed-size one
_WIDTHS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class GGUFHeaderError(ValueError):
    """The header cannot be walked: the file ends inside it, or its lengths are corrupt."""


class GGUFVersionError(GGUFHeaderError):
    """A GGUF version this reader does not know (1: before 2023-08; a newer one)."""


@dataclass(frozen=True)
class GGUFHeader:
    file_size: int
    architecture: str | None  # general.architecture
    tensor_types: tuple[tuple[str, int], ...]  # (tensor name, ggml type id), in file order
    data_offset: int
    data_end: int | None  # None: a tensor's type has no known size


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """The header of the GGUF file `path` (its magic bytes already checked); raises
    GGUFHeaderError for a header cut short or corrupt, OSError when it cannot be read."""
    st = os.stat(path)
    return _read(os.path.realpath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read(path: str, size: int, mtime_ns: int) -> GGUFHeader:
    with open(path, "rb") as f:
        if size == 0:
            raise GGUFHeaderError("it is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _walk(buf, size)
            except struct.error as e:  # a read past the end
                raise GGUFHeaderError("it ends inside its header") from e
            except UnicodeDecodeError as e:
                raise GGUFHeaderError(f"a name in its header is not UTF-8 ({e})") from e


def _walk(buf: mmap.mmap, size: int) -> GGUFHeader:
    if buf[:4] != _MAGIC:
        raise GGUFHeaderError(f"it starts with {bytes(buf[:4])!r}, not GGUF's magic bytes")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = "<"
    if version & 0xFFFF == 0:  # written on a machine of the other byte order
        order, (version,) = ">", struct.unpack_from(">I", buf, 4)
    if version not in _VERSIONS:
        raise GGUFVersionError(f"it is GGUF version {version}; kvspill reads versions 2 and 3")
    num_tensors, num_fields = struct.unpack_from(order + "QQ", buf, 8)
    cursor = _Cursor(buf, size, order, pos=24)
    architecture, alignment = cursor.fields(num_fields)
    infos = [cursor.tensor_info() for _ in range(num_tensors)]
    cursor.check_inside()
    header_end = pos = cursor.pos
    if alignment > 0 and pos % alignment:
        pos += alignment - pos % alignment
    return GGUFHeader(
        file_size=size,
        architecture=architecture,
        tensor_types=tuple((name, qtype) for name, qtype, _, _ in infos),
        data_offset=pos,
        data_end=_data_end(pos, infos) if infos else header_end,  # no tensors: no padding needed
    )


class _Cursor:
    """A position in the header and the reads that move it (values of the file's byte order)."""

    def __init__(self, buf: mmap.mmap, size: int, order: str, pos: int) -> None:
        self.buf, self.size, self.order, self.pos = buf, size, order, pos
        self._u32 = struct.Struct(order + "I").unpack_from
        self._u64 = struct.Struct(order + "Q").unpack_from

    def check_inside(self) -> None:
        if self.pos > self.size:
            raise GGUFHeaderError("it ends inside its header")

    def u32(self) -> int:
        (value,) = self._u32(self.buf, self.pos)
        self.pos += 4
        return int(value)

    def u64(self) -> int:
        (value,) = self._u64(self.buf, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        n = self.u64()
        end = self.pos + n
        if end > self.size:
            raise GGUFHeaderError("it ends inside its header")
        text = bytes(self.buf[self.pos : end]).decode("utf-8")
        self.pos = end
        return text

    def fields(self, num_fields: int) -> tuple[str | None, int]:
        """Walks the key/value fields; returns general.architecture and general.alignment."""
        architecture: str | None = None
        alignment = _DEFAULT_ALIGNMENT
        for _ in range(num_fields):
            key = self.string()
            vtype = self.u32()
            if key == "general.architecture" and vtype == _STRING:
                architecture = self.string()
            elif key == "general.alignment" and vtype == _UINT32:
                alignment = self.u32()
            else:
                self.skip(vtype)
            self.check_inside()
        return architecture, alignment

    def skip(self, vtype: int) -> None:
        """Past one value of type `vtype` without making it (a vocabulary: its lengths only)."""
        if vtype in _WIDTHS:
            self.pos += _WIDTHS[vtype]
        elif vtype == _STRING:
            length = self.u64()  # moves pos past the length first
            self.pos += length
        elif vtype != _ARRAY:
            raise GGUFHeaderError(f"it has an unknown value type {vtype} at byte {self.pos}")
        else:
            item_type = self.u32()
            count = self.u64()
            if item_type in _WIDTHS:
                self.pos += count * _WIDTHS[item_type]
                return
            if item_type == _STRING:  # a vocabulary: a loop of its own (49K names in SmolLM2's)
                buf, u64, pos = self.buf, self._u64, self.pos
                for _ in range(count):
                    pos += 8 + u64(buf, pos)[0]
                self.pos = pos
                return
            for _ in range(count):
                self.skip(item_type)
                if self.pos > self.size:
                    break

    def tensor_info(self) -> tuple[str, int, int, int]:
        """One tensor's (name, type id, elements, offset)."""
        name = self.string()
        num_dims = self.u32()
        dims = struct.unpack_from(f"{self.order}{num_dims}Q", self.buf, self.pos)
        self.pos += 8 * num_dims
        qtype = self.u32()
        offset = self.u64()
        elements = 1
        for d in dims:
            elements *= d
        return name, qtype, elements, offset


def _data_end(data_offset: int, infos: list[tuple[str, int, int, int]]) -> int | None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    end = data_offset
    for _, qtype, elements, offset in infos:
        try:
            block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        except (ValueError, KeyError):
            return None
        end = max(end, data_offset + offset + elements * type_size // block_size)
    return end


def unreadable_types(header: GGUFHeader) -> dict[str, list[str]]:
    """Type name -> the tensors in it, for every tensor in a type gguf cannot dequantize (every
    GGUF tensor kvspill loads goes through gguf's dequantizer, or a kernel of some of its types)."""
    found: dict[str, list[str]] = {}
    for name, qtype in header.tensor_types:
        if not _dequantizable(qtype):
            found.setdefault(_type_name(qtype), []).append(name)
    return found


def readable_type_names() -> list[str]:
    """The tensor types gguf dequantizes (F32, F16, BF16, Q4_0, ... IQ4_XS)."""
    from gguf.constants import GGMLQuantizationType

    return [t.name for t in GGMLQuantizationType if _dequantizable(int(t))]


def _type_name(qtype: int) -> str:
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(qtype).name
    except ValueError:
        return f"ggml type id {qtype}"


@functools.cache
def _dequantizable(qtype: int) -> bool:
    """Whether gguf dequantizes `qtype`: tried on one block of zeros (gguf raises
    NotImplementedError for a type it has no dequantizer for: Q8_1, Q8_K, I8..I64, F64)."""
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    try:
        qt = GGMLQuantizationType(qtype)
        type_size = GGML_QUANT_SIZES[qt][1]
        dequantize(np.zeros((1, type_size), np.uint8), qt)
    except (ValueError, KeyError, NotImplementedError):
        return False
    return True
