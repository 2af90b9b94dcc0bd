"""transformers 4.x's merge rebuild for a GGUF sentencepiece vocabulary, in linear time.

A sentencepiece ("llama") GGUF vocabulary carries no merges: Llama-2, Mistral 7B, CodeLlama,
TinyLlama files. transformers 4.x rebuilds them when it converts the tokenizer
(`integrations/ggml.GGUFTokenizerSkeleton`): for every token and every split point it asks
`piece in tokens`, where `tokens` is the vocabulary as a list, so each test scans it. On 2 cores
and transformers 4.57.3 a first start's tokenizer of a 32K vocabulary took 43 s through kvspill's
loader (13 s with this); a 128K one took 12 minutes on an H200 host (bench/results/
2026-12-04-h200-rope-in-decode, call H; 23 s with this), the server answering 503 meanwhile.
transformers 5 rebuilds merges with a dict (`tokenization_utils_base.generate_merges`).

`linear_merge_rebuild()` hands that constructor the same list with a set behind `in`: the same
merges in the same order, so the same tokenizer (tests/model/test_gguf_merge_rebuild.py). Where the
constructor does not exist (transformers 5) it does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

_PATCH_LOCK = threading.RLock()


class IndexedTokens(list[str]):
    """A token list whose `in` is a set lookup; everything else is the list's."""

    def __init__(self, tokens: Iterable[str]) -> None:
        super().__init__(tokens)
        self._members = frozenset(self)

    def __contains__(self, item: object) -> bool:
        return item in self._members


def _skeleton_class() -> Any:
    """transformers 4.x's GGUFTokenizerSkeleton, or None."""
    try:
        from transformers.integrations import ggml
    except ImportError:
        return None
    return getattr(ggml, "GGUFTokenizerSkeleton", None)


@contextmanager
def linear_merge_rebuild() -> Iterator[None]:
    """While open, transformers 4.x's GGUF tokenizer skeleton sees its token list as
    `IndexedTokens` when it has to rebuild merges. Process-wide while open (another thread's
    conversion gets the same merges, faster); restored on exit."""
    skeleton = _skeleton_class()
    if skeleton is None:
        yield
        return
    with _PATCH_LOCK:
        original = skeleton.__init__

        def init(self: Any, dict_: dict[str, Any]) -> None:
            tokens = dict_.get("tokens")
            if "merges" not in dict_ and isinstance(tokens, list) and not isinstance(tokens, IndexedTokens):
                dict_ = {**dict_, "tokens": IndexedTokens(tokens)}
            original(self, dict_)

        skeleton.__init__ = init
        try:
            yield
        finally:
            skeleton.__init__ = original
