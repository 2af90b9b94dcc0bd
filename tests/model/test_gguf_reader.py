"""A .gguf file is parsed once per engine start (kvspill/gguf/reader.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from tiny_gguf import write_tiny_gguf
from transformers import AutoConfig

from kvspill.gguf.reader import read_gguf, shared_readers


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", vocab_rows=16)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths GGUFReader.__init__ ran on (one entry per parse)."""
    seen: list[str] = []
    original = gguf.GGUFReader.__init__

    def counting(self, path, *args, **kwargs):
        seen.append(str(path))
        original(self, path, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", counting)
    return seen


def test_inside_the_block_ours_and_transformers_readers_are_one_parse(tiny_gguf, parses) -> None:
    with shared_readers():
        first = read_gguf(tiny_gguf)
        config = AutoConfig.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
        assert read_gguf(tiny_gguf) is first
        assert gguf.GGUFReader(str(tiny_gguf)) is first  # as transformers calls it
    assert config.hidden_size == 32 and config.num_key_value_heads == 1
    assert parses == [str(tiny_gguf)]
    assert isinstance(gguf.GGUFReader, type)  # the block restores gguf's class


def test_outside_the_block_nothing_is_cached(tiny_gguf, parses) -> None:
    assert read_gguf(tiny_gguf) is not read_gguf(tiny_gguf)
    assert len(parses) == 2


def test_a_changed_file_is_parsed_again(tiny_gguf, parses, tmp_path) -> None:
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    with shared_readers():
        first = read_gguf(copy)
        copy.write_bytes(tiny_gguf.read_bytes() + b"\0" * 32)  # size changes: a new file
        assert read_gguf(copy) is not first
    assert len(parses) == 2
