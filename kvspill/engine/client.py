"""What the server needs of an engine: `EngineClient`, the Protocol `LLMEngine` satisfies.

The server (`server/async_engine.py`, `server/app.py`) holds its engine through this interface
only, so tests can serve a fake engine and mypy checks the real one and the fakes against one
written contract (tests/server/test_engine_client.py).

Invariants:
- Torch-free: importing it loads no model code (the server's imports stay light; import-linter).
- Every member is one the server uses, and nothing else: add a member here before the server
  calls it, and the fakes under tests/server follow.
- Only the server's engine thread calls these (`AsyncEngine`): implementations need no locks.
- `KVCacheControl` (the `/v1/kv/*` cache operations) is a protocol of its own: an engine without
  it (the fakes) serves everything else, and those routes answer 404 saying so.
  The one exception is `guided_compiler`, whose methods are thread-safe: the server compiles
  grammars on threads of its own so that the engine thread never does (`server/grammar_gate.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from kvspill.guided.spec import GuidedSpec
from kvspill.prefix_records import LookupResult, OpResult, PrefixInfo
from kvspill.sampling_params import SamplingParams
from kvspill.stats import KVStats
from kvspill.types import RequestOutput


class FimTokenIds(Protocol):
    """Fill-in-the-middle token ids (`tokenizer.FimTokens` fits)."""

    @property
    def prefix_id(self) -> int: ...

    @property
    def suffix_id(self) -> int: ...

    @property
    def middle_id(self) -> int: ...


class TokenizerClient(Protocol):
    """The tokenizer calls the server makes (`tokenizer.TokenizerBundle` fits)."""

    @property
    def fim_tokens(self) -> FimTokenIds | None: ...  # None: the vocabulary has no FIM tokens

    @property
    def chat_template(self) -> str | None: ...  # None: a base model (no chat)

    @property
    def sampling_defaults(self) -> Mapping[str, float | int]: ...  # for what a request leaves out

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], **template_kwargs: Any
    ) -> list[int]: ...  # with the generation prompt unless told otherwise; raises for rejected messages


class GrammarCompilerClient(Protocol):
    """The engine's grammar compiler as the server uses it (`guided.compiler.GuidedCompiler`
    fits). Thread-safe; the compiled grammar is opaque here (an xgrammar CompiledGrammar)."""

    def tokenizer_info_json(self) -> str: ...  # the tokenizer as xgrammar reads it, serialized

    def cached(self, spec: GuidedSpec) -> object | None: ...  # the compiled grammar if at hand

    def compile(self, spec: GuidedSpec) -> object: ...  # raises InvalidParameterError


@runtime_checkable
class EngineClient(Protocol):
    """The engine as the server drives it: requests in, `RequestOutput`s out, one `step()` at a time.

    Errors: `add_request` raises a `KvspillError` subclass for a request it refuses (bad input; with
    `admission`, KV that can never fit or has no room now); `step()` may raise anything, and the
    server then fails the requests in flight.
    """

    @property
    def max_model_len(self) -> int: ...  # tokens of one sequence: prompt + output

    @property
    def context_shift(self) -> bool: ...  # --context-shift: past max_model_len by dropping the middle

    @property
    def vocab_size(self) -> int: ...  # token ids are in [0, vocab_size)

    @property
    def tokenizer(self) -> TokenizerClient | None: ...  # None: token ids in, token ids out

    @property
    def guided_compiler(self) -> GrammarCompilerClient | None: ...  # None: no guided decoding

    def encode(self, prompt: str) -> list[int]: ...
    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]: ...

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        req_id: str | None = None,
        admission: bool = False,
    ) -> str: ...  # the request's id

    def abort_request(self, req_id: str) -> None: ...  # unknown or finished ids are ignored

    def has_unfinished_requests(self) -> bool: ...

    def step(self) -> list[RequestOutput]: ...  # one output per request the step changed

    def kv_stats(self) -> KVStats: ...

    def kv_tokens_needed(self, num_prompt_tokens: int, params: SamplingParams) -> int: ...

    def kv_capacity_tokens(self) -> int: ...  # tokens of KV all tiers hold together


@runtime_checkable
class KVCacheControl(Protocol):
    """Cache management by prefix (`kv/prefix_control.py`), between steps: what `/v1/kv/prefixes`,
    `lookup`, `pin`, `unpin`, `move` and `clear` call. Errors: `UnknownPrefixError` (404),
    `KVConflictError` (409), `InvalidParameterError` (400); nothing changes when one is raised."""

    def kv_prefixes(self) -> list[PrefixInfo]: ...

    def kv_lookup(self, token_ids: list[int]) -> LookupResult: ...

    def kv_pin(self, prefix_id: str, tier: str) -> OpResult: ...

    def kv_unpin(self, prefix_id: str, tier: str) -> OpResult: ...

    def kv_move(self, prefix_id: str, tier: str, partial: bool = False) -> OpResult: ...

    def kv_clear(self, prefix_id: str | None, persisted: bool = False) -> OpResult: ...
