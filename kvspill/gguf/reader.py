"""One parse of a GGUF file per engine start, by the fast reader.

gguf's `GGUFReader` parses every metadata field eagerly: the embedded SmolLM2's 49K-token
vocabulary takes 1.5-8 s on a 2-core CPU, so `read_gguf` returns a `gguf_fast.FastGGUFReader`
(the same API and values; array elements are made on access: 0.1 s). Starting an engine on a
.gguf file needed the file four times (the plan's shapes, transformers' config, transformers'
tokenizer, the weights), so four parses. Inside `shared_readers()`, `read_gguf(path)` and every `gguf.GGUFReader(path)` that
transformers makes (it imports the name from the `gguf` module when called) return one reader per
file; the block's end drops them, so nothing is held after start-up.

Invariants: a reader is shared only for mode "r" (read-only memmap: no consumer can change it) and
only while the file's size and mtime are unchanged; outside the block nothing is cached.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_readers: dict[tuple[str, int, int], Any] = {}
_depth = 0  # nesting of shared_readers() blocks
_reader_class: Any = None  # gguf's own GGUFReader, kept while the module name is patched


def read_gguf(path: str | os.PathLike[str]) -> Any:
    """A read-only FastGGUFReader of `path`: shared inside `shared_readers()`, fresh outside it."""
    from kvspill.gguf.fast import FastGGUFReader as reader_class

    if _depth == 0:
        return reader_class(os.fspath(path), "r")
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _lock:  # one parse even if two threads ask at once
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = reader_class(os.fspath(path), "r")
        return reader


@contextmanager
def shared_readers() -> Iterator[None]:
    """Within the block every read-only GGUFReader of one file is the same parsed reader."""
    global _depth, _reader_class
    import gguf

    with _lock:
        if _depth == 0:
            _reader_class = gguf.GGUFReader
            original = _reader_class

            def shared(path: str | os.PathLike[str], mode: str = "r") -> Any:
                return read_gguf(path) if mode == "r" else original(path, mode)

            setattr(gguf, "GGUFReader", shared)  # noqa: B010 (mypy: a class attribute replaced by a function)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                setattr(gguf, "GGUFReader", _reader_class)  # noqa: B010
                _reader_class = None
                _readers.clear()
