"""`kvspill eval --tasks shift_ppl`: perplexity over a real text three contexts long (Python
standard-library sources, `tasks.teacher_forced_text`), with context shift against plain
truncation, on the same engine flags.

- context shift: one request, the text's first half context as its prompt, every later token
  forced as the greedy choice (the logits are read, then the text's token is made their argmax),
  so the engine shifts its context as it would for a generated stream (--context-shift,
  scheduler/context_shift.py) and each token is scored on the context it keeps;
- truncation: what a client does without it: when the context is full, send the last `keep`
  tokens again as a new prompt (recomputed, no sinks); each window's new tokens are scored from
  its prompt logprobs.
Both score the same tokens (from the first half context on), both keep at least `keep` recent
tokens at each wrap (--context-shift-keep; 0: half the context after the sinks).

Invariant: the shift side runs eagerly with one request (a decode CUDA graph computes its argmax
inside the graph, where the forcing cannot reach); one engine alive at a time.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from kvspill.eval.tasks import teacher_forced_text
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

SHIFT_TASK = "shift_ppl"
CONTEXTS = 3  # the text is this many contexts long

Log = Callable[[str], None]


def _forced_nll(llm: LLM, token_ids: list[int], num_prompt: int) -> list[float]:
    """NLL of token_ids[num_prompt:], each forced in turn as the request's next token."""
    model = llm.engine.runner.model
    original = model.compute_logits
    nll: list[float] = []

    def forcing(hidden: torch.Tensor, widen: bool = True) -> torch.Tensor:
        # [1, vocab] fp32, which widen=False callers take as well: one sampled row a step
        logits = original(hidden)
        if num_prompt + len(nll) >= len(token_ids):  # async scheduling's extra step: dropped
            return logits
        target = token_ids[num_prompt + len(nll)]
        nll.append(-float(torch.log_softmax(logits[0].float(), -1)[target]))
        forced = torch.zeros_like(logits)  # finite: the CPU runner fails a step on non-finite logits
        forced[0, target] = 1.0
        return forced

    model.compute_logits = forcing  # type: ignore[method-assign]
    try:
        params = SamplingParams(
            temperature=0.0, max_tokens=len(token_ids) - num_prompt, ignore_eos=True, detokenize=False
        )
        out = llm.generate([token_ids[:num_prompt]], params)[0]
    finally:
        model.compute_logits = original  # type: ignore[method-assign]
    if len(nll) < len(token_ids) - num_prompt:
        raise RuntimeError(
            f"the forced stream stopped after {len(nll)} of {len(token_ids) - num_prompt} tokens "
            f"(finish_reason {out.finish_reason}: {out.error or 'no error'})"
        )
    return nll[: len(token_ids) - num_prompt]


def _truncated_nll(llm: LLM, token_ids: list[int], num_prompt: int, window: int, keep: int) -> list[float]:
    """NLL of token_ids[num_prompt:] in windows of `window` tokens, each starting with the last
    `keep` tokens of the one before (the first with the whole prompt)."""
    nll: list[float] = []
    start, scored_from = 0, num_prompt
    while scored_from < len(token_ids):
        stop = min(start + window - 1, len(token_ids))  # one token short: the request generates one
        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        out = llm.generate([token_ids[start:stop]], params)[0]
        assert out.prompt_logprobs is not None
        nll += [-lp.logprob for lp in out.prompt_logprobs[scored_from - start :] if lp is not None]
        start, scored_from = stop - keep, stop
    return nll


def _row(mode: str, nll: list[float], seconds: float, length: int) -> dict[str, Any]:
    mean = sum(nll) / len(nll)
    return {
        "mode": mode,
        "length": length,
        "num_tokens": len(nll),
        "nll": round(mean, 4),
        "perplexity": round(math.exp(mean), 3),
        "seconds": round(seconds, 1),
    }


def run_shift_eval(
    model: str | None, engine_kwargs: dict[str, Any], seed: int, log: Log
) -> list[dict[str, Any]]:
    """Both rows (context shift, truncation) for the engine flags' max_model_len."""
    shift_kwargs = {**engine_kwargs, "context_shift": True, "enforce_eager": True}
    llm = LLM(model, **shift_kwargs)
    window = llm.engine.max_model_len
    config = llm.engine.scheduler.config
    sinks = config.num_sink_blocks * config.block_size
    keep = config.context_shift_keep or (window - sinks) // 2
    text = teacher_forced_text(CONTEXTS * window, seed, lambda s: len(llm.engine.encode(s)))
    token_ids = llm.engine.encode(text)
    num_prompt = window // 2
    log(
        f"[{SHIFT_TASK}] {len(token_ids)} tokens of stdlib text, context {window}, keep {keep}: context shift ..."
    )
    started = time.perf_counter()
    rows = [
        _row("context shift", _forced_nll(llm, token_ids, num_prompt), time.perf_counter() - started, window)
    ]
    del llm
    gc.collect()
    log(f"[{SHIFT_TASK}] truncation ...")
    llm = LLM(model, **{**engine_kwargs, "context_shift": False})
    started = time.perf_counter()
    nll = _truncated_nll(llm, token_ids, num_prompt, window, keep)
    rows.append(_row("truncation", nll, time.perf_counter() - started, window))
    for row in rows:
        log(
            f"{row['mode']:>18} @ {window:>6}: perplexity {row['perplexity']:.3f} over {row['num_tokens']} tokens"
        )
    return rows
