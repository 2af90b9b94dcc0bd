"""A one-layer llama GGUF of a few KB, for tests of GGUF metadata paths (no real weights)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def write_tiny_gguf(
    path: Path,
    context_length: int = 256,
    vocab_rows: int = 32,
    add_tokenizer: Callable[[Any], int] | None = None,
    add_more: Callable[[Any], None] | None = None,
) -> Path:
    """The file at `path` (`context_length` makes two files differ; `vocab_rows`: token_embd's rows).
    `add_tokenizer(writer)`: adds a tokenizer's metadata and returns its vocabulary size, which
    then gives token_embd's rows. `add_more(writer)`: other keys and tensors (RoPE scaling)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(context_length)
    w.add_embedding_length(32)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    if add_tokenizer is not None:
        vocab_rows = add_tokenizer(w)
    if add_more is not None:
        add_more(w)
    w.add_tensor("token_embd.weight", np.zeros((vocab_rows, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
