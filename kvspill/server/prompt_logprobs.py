"""vLLM's `prompt_logprobs` answer: each prompt token's logprob given the tokens before it.

The answer is a list with one entry per prompt token: null for the first (it has no prefix), else
an object keyed by token id (a string, as JSON has it) of `{logprob, rank, decoded_token}` holding
the prompt token itself and the `k` most likely tokens at that place (k + 1 entries, or k where
the prompt token is one of them). A completions choice carries it beside `text`; a chat answer at
its top level (vLLM's places). The logprobs come from the engine (`SamplingParams.prompt_logprobs`),
never recomputed here; every one is finite (echo.finite).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvspill.server.echo import finite
from kvspill.types import TokenLogprobs


def vllm_prompt_logprobs(
    prompt_logprobs: Sequence[TokenLogprobs | None], k: int, token_text: Callable[[int], str]
) -> list[dict[str, dict[str, Any]] | None]:
    """The answer's list for one prompt (the engine's entries, `k` top tokens each)."""
    out: list[dict[str, dict[str, Any]] | None] = []
    for lp in prompt_logprobs:
        if lp is None:
            out.append(None)
            continue
        entry = {
            str(tid): {"logprob": finite(v), "rank": rank, "decoded_token": token_text(tid)}
            for rank, (tid, v) in enumerate(lp.top[:k], start=1)
        }
        entry.setdefault(
            str(lp.token_id),
            {"logprob": finite(lp.logprob), "rank": lp.rank, "decoded_token": token_text(lp.token_id)},
        )
        out.append(entry)
    return out
