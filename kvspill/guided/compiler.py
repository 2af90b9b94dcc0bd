"""Compile a `GuidedSpec` into an xgrammar grammar for the served tokenizer, and make matchers.

Why xgrammar: it installs from PyPI as a wheel (no Rust toolchain), reads a Hugging Face
tokenizer directly (byte-level BPE such as Llama 3 / Qwen / SmolLM2, including the tokenizer
transformers builds from a GGUF file, and SentencePiece byte-fallback vocabularies), compiles a
JSON schema in milliseconds (about 50 ms for a small one on SmolLM2's 49K vocabulary, cached
afterwards) and fills a 128K-token bitmask in tens of microseconds per sequence, and it is what
vLLM and SGLang use by default.

Invariants:
- Compiled grammars are cached by (kind, value): the engine compiles at `add_request` (errors
  become 400s there) and the runner's matcher creation is then a cache hit.
- Every failure to compile is an `InvalidParameterError` naming the request field.
- The grammar's vocabulary is the model's logits width; ids past the tokenizer are never allowed.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from kvspill.errors import InvalidParameterError
from kvspill.guided.bitmask import allows_nothing, bit_word
from kvspill.guided.schema_check import check_schema
from kvspill.guided.spec import GuidedSpec

if TYPE_CHECKING:
    import xgrammar as xgr

CACHE_SIZE = 256


def _xgrammar() -> Any:
    """xgrammar, imported at the first guided request: engines that never guide never load it."""
    try:
        import xgrammar
    except ImportError as e:
        raise InvalidParameterError(
            "response_format", f"guided decoding needs the xgrammar package ({e}): pip install xgrammar"
        ) from e
    return xgrammar


def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("\t", "\\t") + '"'


def choice_grammar(options: list[str]) -> str:
    """GBNF whose language is exactly `options`."""
    return "root ::= " + " | ".join(_gbnf_literal(o) for o in options)


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
        self._compiler: xgr.GrammarCompiler | None = None
        self._json_allowed_words: torch.Tensor | None = None
        self._cache: OrderedDict[tuple[str, str], xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def _ready(self) -> xgr.GrammarCompiler:
        with self._lock:
            if self._compiler is None:
                xgr = _xgrammar()
                info = xgr.TokenizerInfo.from_huggingface(
                    self._hf_tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids
                )
                self._json_allowed_words = _json_allowed_words(info, self.vocab_size)
                self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            return self._compiler

    @property
    def json_allowed_words(self) -> torch.Tensor:
        self._ready()
        assert self._json_allowed_words is not None
        return self._json_allowed_words

    def compile(self, spec: GuidedSpec) -> xgr.CompiledGrammar:
        with self._lock:
            hit = self._cache.get(spec.cache_key)
            if hit is not None:
                self._cache.move_to_end(spec.cache_key)
                return hit
        compiled = self._compile_uncached(spec)
        self._check_can_start(compiled, spec)
        with self._lock:
            self._cache[spec.cache_key] = compiled
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def _check_can_start(self, compiled: xgr.CompiledGrammar, spec: GuidedSpec) -> None:
        """A grammar that no token of the vocabulary can start (a regex of characters the
        tokenizer cannot spell, such as lone surrogates) would leave every logit at -inf: the
        step would sample an arbitrary token outside the grammar and fail. Refuse it here, as
        the request's error (found by tests/server/test_fuzz.py)."""
        matcher = _xgrammar().GrammarMatcher(compiled)
        if matcher.is_terminated():
            return
        bitmask = torch.full((1, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)
        matcher.fill_next_token_bitmask(bitmask, 0)
        if allows_nothing(bitmask[0], self.vocab_size):
            raise InvalidParameterError(
                spec.param, f"{spec.param}: no token of the model's vocabulary can start this {spec.kind}"
            )

    def matcher(self, spec: GuidedSpec) -> xgr.GrammarMatcher:
        return _xgrammar().GrammarMatcher(self.compile(spec))

    def _compile_uncached(self, spec: GuidedSpec) -> xgr.CompiledGrammar:
        compiler = self._ready()
        try:
            if spec.kind == "json_schema":
                check_schema(json.loads(spec.value), spec.param)
                return compiler.compile_json_schema(spec.value, any_whitespace=False, strict_mode=True)
            if spec.kind == "json_object":
                return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if spec.kind == "regex":
                return compiler.compile_regex(spec.value)
            if spec.kind == "choice":
                return compiler.compile_grammar(choice_grammar(json.loads(spec.value)))
            return compiler.compile_grammar(spec.value)
        except InvalidParameterError:
            raise
        except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError with its parser's message
            detail = str(e).split(": ", 1)[-1].strip() if "] /" in str(e) else str(e)
            raise InvalidParameterError(
                spec.param, f"{spec.param}: cannot compile this {spec.kind}: {detail}"
            ) from e
