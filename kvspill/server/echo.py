"""`echo` on `/v1/completions`: the prompt before the completion, with its token logprobs.

The legacy OpenAI completions API (what lm-eval's `local-completions` model scores with:
`echo=true, logprobs=1, max_tokens=0`) answers the prompt text followed by the generated text,
and with `logprobs` the prompt tokens' logprobs before the generated ones, in the same four
lists: `tokens`, `token_logprobs`, `top_logprobs`, `text_offset`. The first prompt token has no
prefix: its `token_logprob` and `top_logprobs` are null (as vLLM and OpenAI answer).

Invariants:
- `max_tokens=0` is allowed only with `echo` (score the prompt, generate nothing); the engine runs
  such a request with one output token, which the answer leaves out (vLLM does the same).
- The prompt logprobs come from the engine (`SamplingParams.prompt_logprobs = logprobs`), never
  recomputed here; `top_logprobs` holds the top `logprobs` tokens of each position.
- Streaming with echo is refused by name (not silently answered without the prompt).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvspill.engine.client import TokenizerClient
from kvspill.errors import InvalidParameterError
from kvspill.sampling_params import SamplingParams
from kvspill.types import TokenLogprobs

MIN_LOGPROB = -9999.0  # what vLLM sends for a token of probability 0


def finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else MIN_LOGPROB


@dataclass(frozen=True)
class Echo:
    """How a completions job echoes its prompts: `texts[i]` is prompt i as the client sent it."""

    texts: list[str]
    score_only: bool  # max_tokens=0: the answer holds the prompt only


def echo_sampling_params(
    params: SamplingParams, *, echo: bool, max_tokens: int | None, stream: bool, suffix: str | None
) -> SamplingParams:
    """The engine's params for a completions request with these echo-related fields."""
    if max_tokens == 0 and not echo:
        raise InvalidParameterError(
            "max_tokens", "max_tokens=0 needs echo=true (it scores the prompt without generating)"
        )
    if not echo:
        return params
    if stream:
        raise InvalidParameterError(
            "stream", "echo=true is not supported with stream=true: send stream=false"
        )
    if suffix:
        raise InvalidParameterError("echo", "echo=true cannot be combined with suffix")
    asked = [k for k in (params.logprobs, params.prompt_logprobs) if k is not None]
    return replace(params, prompt_logprobs=max(asked) if asked else None)  # each answer slices its own k


def make_echo(
    echo: bool,
    max_tokens: int | None,
    prompts: Sequence[str | list[int]],
    tokenizer: TokenizerClient | None,
    vocab_size: int,
) -> Echo | None:
    """The job's echo (None without echo=true): each prompt as sent, token ids decoded to text."""
    if not echo:
        return None
    if tokenizer is None:
        raise InvalidParameterError("echo", "this model has no tokenizer, so it cannot echo text")
    for p in prompts:  # checked before decoding (the engine would refuse them after)
        bad = next((t for t in p if not 0 <= t < vocab_size), None) if not isinstance(p, str) else None
        if bad is not None:
            raise InvalidParameterError(
                "prompt", f"token id {bad} is outside the vocabulary [0, {vocab_size})"
            )
    texts = [p if isinstance(p, str) else tokenizer.decode(p, skip_special_tokens=False) for p in prompts]
    return Echo(texts, score_only=max_tokens == 0)


def legacy_prompt_logprobs(
    prompt_logprobs: Sequence[TokenLogprobs | None],
    prompt_token_ids: Sequence[int],
    k: int,
    token_text: Callable[[int], str],
) -> dict[str, list[Any]]:
    """The legacy logprobs lists of the prompt tokens; offsets from 0, one entry per token."""
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    offset = 0
    for token_id, lp in zip(prompt_token_ids, prompt_logprobs, strict=True):
        token = token_text(token_id)
        tokens.append(token)
        offsets.append(offset)
        offset += len(token)
        if lp is None:
            token_lps.append(None)
            tops.append(None)
        else:
            token_lps.append(finite(lp.logprob))
            tops.append({token_text(t): finite(v) for t, v in lp.top[:k]} if k else None)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


def join_legacy(first: dict[str, list[Any]], then: dict[str, list[Any]] | None) -> dict[str, list[Any]]:
    """Prompt lists followed by the generated tokens' lists (same keys)."""
    if then is None:
        return first
    return {key: first[key] + then[key] for key in first}
