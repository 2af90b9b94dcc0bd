"""Prompt-token logprobs during (chunked) prefill: vLLM's `prompt_logprobs`.

A prefill chunk of a request covers positions [start, start + n); the hidden state at position p
predicts the token at p + 1, so the chunk scores the prompt tokens start + 1 .. start + n that
are prompt tokens (the last row of the prompt predicts the first output: that one is sampled, not
scored here). The chunks of one prompt together score every prompt token but the first.

Logprobs are the model's own (`log_softmax` of the logits, no penalties, bias or grammar), in
float32. Rows are scored in slices of SLICE_ROWS so a long chunk never holds [n, vocab] logits at
once (a 4K-token chunk of a 128K vocabulary would be 2 GiB).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvspill.runner.inputs import RunnerRequestState, StepInputs
from kvspill.types import PromptLogprobs, TokenLogprobs

SLICE_ROWS = 256


def prompt_logprob_spans(
    inputs: StepInputs, states: dict[str, RunnerRequestState]
) -> list[tuple[str, int, int, int]]:
    """(req_id, first token row, first scored position, number of positions) for each request of
    the step that asks for prompt logprobs and has prompt tokens to score in its chunk."""
    spans = []
    for i, req_id in enumerate(inputs.req_ids):
        st = states[req_id]
        if st.sampling.params.prompt_logprobs is None:
            continue
        row0 = int(inputs.query_start_loc[i])
        n = int(inputs.query_start_loc[i + 1]) - row0
        start = int(inputs.positions[row0])
        end = min(start + n, len(st.sampling.prompt_token_ids) - 1)  # last row scored: end - 1
        if end > start:
            spans.append((req_id, row0, start + 1, end - start))
    return spans


@torch.inference_mode()
def compute_prompt_logprobs(
    hidden: torch.Tensor,
    spans: list[tuple[str, int, int, int]],
    states: dict[str, RunnerRequestState],
    compute_logits: Callable[[torch.Tensor], torch.Tensor],
) -> dict[str, PromptLogprobs]:
    """hidden: [num_tokens, hidden_size] of the step. Scores each span's prompt tokens."""
    out: dict[str, PromptLogprobs] = {}
    for req_id, row0, first, count in spans:
        prompt = states[req_id].sampling.prompt_token_ids
        k = states[req_id].sampling.params.prompt_logprobs or 0
        entries: list[TokenLogprobs] = []
        for off in range(0, count, SLICE_ROWS):
            m = min(SLICE_ROWS, count - off)
            logprobs = compute_logits(hidden[row0 + off : row0 + off + m]).log_softmax(dim=-1)  # [m, vocab]
            targets = prompt[first + off : first + off + m]
            target_ids = torch.tensor(targets, dtype=torch.long, device=logprobs.device).unsqueeze(1)
            chosen = logprobs.gather(1, target_ids).squeeze(1).tolist()
            top_ids: list[list[int]] = [[] for _ in range(m)]
            top_vals: list[list[float]] = [[] for _ in range(m)]
            if k > 0:
                vals, ids = logprobs.topk(k, dim=-1)  # [m, k], best first
                top_vals, top_ids = vals.tolist(), ids.tolist()
            entries.extend(
                TokenLogprobs(token_id=t, logprob=lp, top=list(zip(ti, tv, strict=True)))
                for t, lp, ti, tv in zip(targets, chosen, top_ids, top_vals, strict=True)
            )
        out[req_id] = PromptLogprobs(start=first, entries=entries)
    return out
