"""Streaming detokenization and stop-string handling (pure Python, no torch).

`IncrementalDetokenizer` turns generated token ids into text deltas one token at a time, the
way vLLM and TGI do: it decodes a short window of ids `[prefix_offset:]` and emits what extends
past the decode of `[prefix_offset:read_offset]`. Decoding a window rather than single tokens
keeps tokenizers whose output for a token depends on its neighbours (SentencePiece's leading
space, byte-level BPE's multi-byte characters) correct.

Invariants of `IncrementalDetokenizer`:
- A delta never ends in U+FFFD: a character whose UTF-8 bytes are split across tokens is held
  until its last byte arrives. (A U+FFFD followed by more text is an invalid byte sequence the
  model produced; it is emitted as the tokenizer decodes it.)
- The concatenated deltas, plus `flush()` at the end, are the text the output adds after the
  prompt: `decode(tail + output) - decode(tail)` for the prompt's last few tokens `tail`. For
  byte-level BPE (Llama-3, SmolLM2, Qwen) that is `tokenizer.decode(output_ids,
  skip_special_tokens=...)`; for SentencePiece it keeps the first token's leading space, which
  decoding the output alone would strip.
- The prompt is only context for the first window; its text is never emitted. A prompt tail
  that ends inside a character is not used as context.

`StopChecker` applies stop strings to the stream of text deltas. Invariants:
- Nothing it emits is later retracted: a tail that could be the start of a stop string is held
  back until it is ruled out (unless the stop string is to be included anyway, when holding back
  buys nothing).
- The match is the stop-string occurrence that ends first in the text (ties: the one starting
  first), so the result does not depend on how the text was split into deltas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kvspill.text.stop_strings import StopAutomaton

_REPLACEMENT = "\ufffd"
# Prompt tokens decoded with the first output tokens, as vLLM's
# INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET: enough for the leading-space rules we know of.
_NUM_PROMPT_CONTEXT_TOKENS = 5


class Tokenizer(Protocol):
    """What the detokenizer needs: a Hugging Face tokenizer's `decode`."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Per-request streaming decoder of output token ids.

    `add(ids)` returns the text those ids finished; `text` is everything emitted so far;
    `flush()` emits what is still held (an unfinished character) when the request ends.
    """

    def __init__(
        self, tokenizer: Tokenizer, prompt_token_ids: Sequence[int], skip_special_tokens: bool
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        context = list(prompt_token_ids[-_NUM_PROMPT_CONTEXT_TOKENS:])
        if context and self._decode(context).endswith(_REPLACEMENT):
            context = []  # its unfinished character would shift every later delta
        self.token_ids: list[int] = context  # the prompt tail, then every output token
        self.num_context_tokens = len(context)
        # token_ids[prefix_offset:read_offset] decodes to text already emitted (or prompt text);
        # token_ids[read_offset:] are tokens whose text is still held.
        self.prefix_offset = 0
        self.read_offset = len(context)
        self._chunks: list[str] = []

    @property
    def text(self) -> str:
        """All text emitted so far (not including held text)."""
        return "".join(self._chunks)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_context_tokens :]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def add(self, token_ids: Sequence[int]) -> str:
        """Append output tokens; return the newly finished text (may be "")."""
        deltas = []
        for token_id in token_ids:
            self.token_ids.append(token_id)
            deltas.append(self._step(final=False))
        delta = "".join(deltas)
        if delta:
            self._chunks.append(delta)
        return delta

    def flush(self) -> str:
        """Emit any held text (an incomplete character at the end of the request), as decoded."""
        delta = self._step(final=True) if self.read_offset < len(self.token_ids) else ""
        if delta:
            self._chunks.append(delta)
        return delta

    def _step(self, final: bool) -> str:
        prefix_text = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
        new_text = self._decode(self.token_ids[self.prefix_offset :])
        if len(new_text) <= len(prefix_text) or (new_text.endswith(_REPLACEMENT) and not final):
            # Nothing finished yet: a special token skipped, or a character still incomplete.
            return ""
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.token_ids)
        return new_text[len(prefix_text) :]


class StopChecker:
    """Cuts a stream of text deltas at the first stop string.

    `add(delta)` returns `(text_to_emit, matched_stop)`; once `matched_stop` is not None the
    request is finished and later calls return `("", None)`. `flush()` returns the held tail
    when the request ends for another reason (eos, max_tokens). Linear in the text: the
    automaton (`text/stop_strings.py`) carries the matching state from one delta to the next.
    """

    def __init__(self, stop: tuple[str, ...], include_stop_str_in_output: bool) -> None:
        assert all(stop), "stop strings must be non-empty"
        self.stop = stop
        self.include_stop_str_in_output = include_stop_str_in_output
        self.held = ""  # text received but not emitted: the longest tail a stop string may start in
        self.matched: str | None = None
        self._automaton = StopAutomaton(stop) if stop else None
        self._node = 0

    def add(self, delta: str) -> tuple[str, str | None]:
        if self.matched is not None:
            return "", None
        if self._automaton is None:
            return delta, None
        automaton, node = self._automaton, self._node
        for i, ch in enumerate(delta):
            node = automaton.next(node, ch)
            if stop_str := automaton.match(node):
                return self._stop(delta[: i + 1], stop_str)
        self._node = node
        if self.include_stop_str_in_output:
            return delta, None  # nothing to hold back: a stop string is emitted anyway
        pending = self.held + delta
        split = len(pending) - automaton.depth(node)
        self.held = pending[split:]
        return pending[:split], None

    def _stop(self, text: str, stop_str: str) -> tuple[str, str]:
        """`stop_str` ends `held + text`."""
        pending, self.held, self.matched = self.held + text, "", stop_str
        if self.include_stop_str_in_output:
            return text, stop_str  # nothing was held: earlier parts of it went out already
        # Without it in the output, all of the stop string was held back or is new.
        return pending[: len(pending) - len(stop_str)], stop_str

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held
