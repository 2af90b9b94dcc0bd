"""One `GuidedSpec` through xgrammar's compiler: the kind's compile call, the schema check, and
the check that some token can start the grammar. Shared by the engine's `GuidedCompiler` and the
server's compile workers (`compile_pool.py`), so both refuse exactly the same specs.

Invariants:
- Torch-free at import (xgrammar, which loads torch, is imported at the first compile): the
  server's compile pool imports this module.
- Every failure to compile is an `InvalidParameterError` naming the request field.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kvspill.errors import InvalidParameterError
from kvspill.guided.schema_check import check_schema
from kvspill.guided.spec import GuidedSpec

if TYPE_CHECKING:
    import xgrammar as xgr


def load_xgrammar() -> Any:
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


def compile_spec(compiler: xgr.GrammarCompiler, spec: GuidedSpec, vocab_size: int) -> xgr.CompiledGrammar:
    """`spec` compiled for the compiler's tokenizer; InvalidParameterError when it cannot be."""
    try:
        if spec.kind == "json_schema":
            check_schema(json.loads(spec.value), spec.param)
            compiled = compiler.compile_json_schema(spec.value, any_whitespace=False, strict_mode=True)
        elif spec.kind == "json_object":
            compiled = compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
        elif spec.kind == "regex":
            compiled = compiler.compile_regex(spec.value)
        elif spec.kind == "choice":
            compiled = compiler.compile_grammar(choice_grammar(json.loads(spec.value)))
        else:
            compiled = compiler.compile_grammar(spec.value)
    except InvalidParameterError:
        raise
    except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError with its parser's message
        detail = str(e).split(": ", 1)[-1].strip() if "] /" in str(e) else str(e)
        raise InvalidParameterError(
            spec.param, f"{spec.param}: cannot compile this {spec.kind}: {detail}"
        ) from e
    check_can_start(compiled, spec, vocab_size)
    return compiled


def check_can_start(compiled: xgr.CompiledGrammar, spec: GuidedSpec, vocab_size: int) -> None:
    """A grammar that no token of the vocabulary can start (a regex of characters the tokenizer
    cannot spell, such as lone surrogates) would leave every logit at -inf: the step would
    sample an arbitrary token outside the grammar and fail. Refuse it as the request's error
    (found by tests/server/test_fuzz.py)."""
    xgr_ = load_xgrammar()
    matcher = xgr_.GrammarMatcher(compiled)
    if matcher.is_terminated():
        return
    bitmask = xgr_.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    if not allows_any(bitmask[0].tolist(), vocab_size):
        raise InvalidParameterError(
            spec.param, f"{spec.param}: no token of the model's vocabulary can start this {spec.kind}"
        )


def allows_any(words: list[int], vocab_size: int) -> bool:
    """Whether int32 bitmask words (bit t of word t // 32: token t) allow a token below vocab_size."""
    full, rest = divmod(vocab_size, 32)
    if any(words[:full]):
        return True
    return bool(rest) and bool(words[full] & ((1 << rest) - 1))
