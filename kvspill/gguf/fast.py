"""A GGUF reader that parses big metadata arrays without one numpy view per element.

gguf's `GGUFReader` builds a numpy view for every element of every array field while it parses:
the SmolLM2 vocabulary (49K token strings, 49K scores and types, 48K merges) is ~250K views and
takes 1.5-8 s on a 2-core CPU, though a start needs few of them. `FastGGUFReader` keeps gguf's
API (`fields`, `tensors`, `ReaderField.parts` / `.data` / `.contents()`, `data_offset`) and gives
the same parts, but an array of scalars or strings gets `_ArrayParts`: a sequence that makes the
view of element i when it is asked for. A string array's element offsets are found by one scan
of its length prefixes (struct, no numpy per element); arrays of arrays are rare and use gguf's
own eager parse. Dtypes are named by string ("uint32"): numpy comes through gguf, so the
planner, which reads GGUF headers, imports no numpy itself (pyproject's import contracts).

Invariants (tests/model/test_gguf_fast.py compares every field and tensor with gguf's reader):
- `field.parts[i]` has gguf's dtype (byte order included), shape and bytes for every i;
  `field.data` and `field.types` equal gguf's.
- A string whose length runs past the end of the file is a ValueError (gguf's reader would
  return a short view); nothing else is checked that gguf does not check.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from gguf.constants import GGUFValueType

# From the submodule: `gguf.GGUFReader` is replaced by a function inside gguf_reader.shared_readers().
from gguf.gguf_reader import GGUFReader, ReaderField

if TYPE_CHECKING:
    import numpy.typing as npt


class _ArrayParts(Sequence[Any]):  # of numpy arrays
    """`prefix` (eager parts) followed by `count * per_item` parts made on access."""

    def __init__(
        self,
        prefix: list[npt.NDArray[Any]],
        count: int,
        per_item: int,
        make: Callable[[int, int], npt.NDArray[Any]],
    ) -> None:
        self._prefix = prefix
        self._count = count
        self._per_item = per_item
        self._make = make  # (item index, part within the item) -> view

    def __len__(self) -> int:
        return len(self._prefix) + self._count * self._per_item

    @overload
    def __getitem__(self, index: int) -> npt.NDArray[Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[npt.NDArray[Any]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(f"part index {index} out of range ({size} parts)")
        if index < len(self._prefix):
            return self._prefix[index]
        item, part = divmod(index - len(self._prefix), self._per_item)
        return self._make(item, part)

    def __iter__(self) -> Iterator[npt.NDArray[Any]]:
        return (self[i] for i in range(len(self)))


class FastGGUFReader(GGUFReader):
    """gguf's reader with lazily made per-element parts for arrays of scalars and strings."""

    def _build_fields(self, offs: int, count: int) -> int:
        for _ in range(count):
            orig_offs = offs
            kv_klen, kv_kdata = self._get_str(offs)
            offs += int(kv_klen.nbytes + kv_kdata.nbytes)
            raw_kv_type = self._get(offs, "uint32")
            offs += int(raw_kv_type.nbytes)
            head: list[npt.NDArray[Any]] = [kv_klen, kv_kdata, raw_kv_type]
            name = str(bytes(kv_kdata), encoding="utf-8")
            if raw_kv_type[0] == GGUFValueType.ARRAY:
                field, offs = self._array_field(orig_offs, name, head, offs)
            else:
                size, parts, idxs, types = self._get_field_parts(offs, raw_kv_type[0])
                field = ReaderField(orig_offs, name, head + parts, [i + len(head) for i in idxs], types)
                offs += size
            self._push_field(field, skip_sum=True)
        return offs

    def _array_field(
        self, orig_offs: int, name: str, head: list[npt.NDArray[Any]], offs: int
    ) -> tuple[ReaderField, int]:
        """The field of an array value at `offs` (after the key and the value type) and its end."""
        raw_itype = self._get(offs, "uint32")
        alen = self._get(offs + 4, "uint64")
        item_type, count = GGUFValueType(raw_itype[0]), int(alen[0])
        prefix = [*head, raw_itype, alen]
        start = offs + 12
        types = [GGUFValueType.ARRAY] + ([item_type] if count else [])
        scalar = self.gguf_scalar_to_np.get(item_type)
        if scalar is not None:
            items = self._get(start, scalar, count)
            if len(items) != count:
                raise ValueError(f"GGUF field {name!r}: its {count}-item array runs past the end of the file")
            parts = _ArrayParts(prefix, count, 1, lambda i, _part: items[i : i + 1])
            data = list(range(len(prefix), len(prefix) + count))
            return ReaderField(orig_offs, name, parts, data, types), start + items.nbytes  # type: ignore[arg-type]
        if item_type == GGUFValueType.STRING:
            starts, end = self._string_offsets(name, start, count)
            parts = _ArrayParts(prefix, count, 2, lambda i, part: self._string_part(starts[i], part))
            data = list(range(len(prefix) + 1, len(prefix) + 2 * count, 2))
            return ReaderField(orig_offs, name, parts, data, types), end  # type: ignore[arg-type]
        # Arrays of arrays: gguf's eager parse (rare; correct by construction).
        size, eager, idxs, eager_types = self._get_field_parts(offs, GGUFValueType.ARRAY)
        field = ReaderField(orig_offs, name, head + eager, [i + len(head) for i in idxs], eager_types)
        return field, offs + size

    def _string_offsets(self, name: str, offs: int, count: int) -> tuple[array[int], int]:
        """Byte offsets of the `count` strings (each a u64 length, then its bytes) from `offs`, and their end."""
        host_little = sys.byteorder == "little"
        length = struct.Struct("<Q" if host_little == (self.byte_order == "I") else ">Q").unpack_from
        buffer: Any = self.data  # a uint8 memmap: struct reads it as a buffer
        size = len(buffer)
        starts = array("q", bytes(8 * count))
        for i in range(count):
            starts[i] = offs
            if offs + 8 > size:
                raise ValueError(f"GGUF field {name!r}: string {i} runs past the end of the file")
            offs += 8 + length(buffer, offs)[0]
        if offs > size:
            raise ValueError(f"GGUF field {name!r}: string {count - 1} runs past the end of the file")
        return starts, offs

    def _string_part(self, offs: int, part: int) -> npt.NDArray[Any]:
        length = self._get(offs, "uint64")
        return length if part == 0 else self._get(offs + 8, "uint8", length[0])
