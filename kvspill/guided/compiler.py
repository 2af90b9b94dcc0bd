"""Compile a `GuidedSpec` into an xgrammar grammar for the served tokenizer, and make matchers.

Why xgrammar: it installs from PyPI as a wheel (no Rust toolchain), reads a Hugging Face
tokenizer directly (byte-level BPE such as Llama 3 / Qwen / SmolLM2, including the tokenizer
transformers builds from a GGUF file, and SentencePiece byte-fallback vocabularies), compiles a
JSON schema in milliseconds (about 50 ms for a small one on SmolLM2's 49K vocabulary, cached
afterwards) and fills a 128K-token bitmask in tens of microseconds per sequence, and it is what
vLLM and SGLang use by default.

Invariants:
- Compiled grammars are cached by `GuidedSpec.cache_key` (a schema's canonical JSON), CACHE_SIZE
  of them. A spec that carries its grammar (`spec.compiled`: the server compiled it off the
  engine thread, `server/grammar_gate.py`) is used as it is: no lookup, no compile, so an
  eviction between the server's compile and the runner's matcher cannot cost a compile there.
- Offline (`LLM`, `kvspill generate`) the engine compiles at `add_request` (errors become 400s
  there) and the runner's matcher creation is then a cache hit.
- `tokenizer_info_json`, `cached` and `compile` are thread-safe: the server calls them from its
  own threads, never the engine's.
- Every failure to compile is an `InvalidParameterError` naming the request field.
- The grammar's vocabulary is the model's logits width; ids past the tokenizer are never allowed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from kvspill.guided.bitmask import bit_word
from kvspill.guided.grammar_compile import compile_spec, load_xgrammar
from kvspill.guided.spec import GuidedSpec

if TYPE_CHECKING:
    import xgrammar as xgr

CACHE_SIZE = 256


def _json_allowed_words(info: xgr.TokenizerInfo, vocab_size: int) -> torch.Tensor:
    """[ceil(vocab/32)] int32: every token but those holding a raw control byte (< 0x20).

    xgrammar's JSON strings admit raw control characters, which JSON forbids (json.loads refuses
    them); compact JSON (any_whitespace=False) needs no raw control byte anywhere, so JSON rows
    AND their bitmask with this. Special tokens (stop tokens) stay allowed."""
    words = torch.full(((vocab_size + 31) // 32,), -1, dtype=torch.int32)
    special = set(info.special_token_ids)
    for token, raw in enumerate(info.decoded_vocab[:vocab_size]):
        if token not in special and any(b < 0x20 for b in raw):
            words[token // 32] &= ~bit_word(token % 32)
    return words


class GuidedCompiler:
    """One per engine: the tokenizer's xgrammar info, a compiler and an LRU of compiled grammars."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        """Cheap: the tokenizer is read into xgrammar at the first guided request (`_ready`)."""
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids)
        self._hf_tokenizer = hf_tokenizer
        self._info: xgr.TokenizerInfo | None = None
        self._compiler: xgr.GrammarCompiler | None = None
        self._json_allowed_words: torch.Tensor | None = None
        self._cache: OrderedDict[tuple[str, str], xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()  # the cache's: held for dict operations only
        self._ready_lock = threading.Lock()  # held while the tokenizer is read (a second or so)

    def _ready(self) -> xgr.GrammarCompiler:
        with self._ready_lock:
            if self._compiler is None:
                xgr_ = load_xgrammar()
                info = xgr_.TokenizerInfo.from_huggingface(
                    self._hf_tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids
                )
                self._json_allowed_words = _json_allowed_words(info, self.vocab_size)
                self._info = info
                self._compiler = xgr_.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            return self._compiler

    def tokenizer_info_json(self) -> str:
        """The tokenizer as xgrammar reads it, serialized (for compile workers in other processes)."""
        self._ready()
        assert self._info is not None
        return str(self._info.serialize_json())

    @property
    def json_allowed_words(self) -> torch.Tensor:
        self._ready()
        assert self._json_allowed_words is not None
        return self._json_allowed_words

    def cached(self, spec: GuidedSpec) -> xgr.CompiledGrammar | None:
        """The compiled grammar of `spec` if it is at hand (carried or cached), else None."""
        if spec.compiled is not None:
            return spec.compiled  # type: ignore[return-value]  # only a CompiledGrammar is attached
        with self._lock:
            hit = self._cache.get(spec.cache_key)
            if hit is not None:
                self._cache.move_to_end(spec.cache_key)
            return hit

    def compile(self, spec: GuidedSpec) -> xgr.CompiledGrammar:
        """The compiled grammar of `spec`: carried, cached, or compiled now (and cached)."""
        hit = self.cached(spec)
        if hit is not None:
            return hit
        compiled = compile_spec(self._ready(), spec, self.vocab_size)
        with self._lock:
            self._cache[spec.cache_key] = compiled
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def matcher(self, spec: GuidedSpec) -> xgr.GrammarMatcher:
        return load_xgrammar().GrammarMatcher(self.compile(spec))
