"""Prompt-token logprobs during (chunked) prefill: vLLM's `prompt_logprobs`.

A prefill chunk of a request covers positions [start, start + n); the hidden state at position p
predicts the token at p + 1, so the chunk scores the prompt tokens start + 1 .. start + n that
are prompt tokens (the last row of the prompt predicts the first output: that one is sampled, not
scored here). The chunks of one prompt together score every prompt token but the first.

Logprobs are the model's own (`log_softmax` of the logits, no penalties, bias or grammar), in
float32. Rows are scored in slices of SLICE_ROWS so a long chunk never holds [n, vocab] logits at
once (a 4K-token chunk of a 128K vocabulary would be 2 GiB). A GGUF-quantized lm_head on a GPU
takes slices of MAX_GEMV_TOKENS rows: past that its projection dequantizes the whole weight into a
temporary (108 MiB for SmolLM2's fp32 lm_head, 1 GiB for an 8B's bf16) that the memory plan does
not hold; an eval's reference engine failed on it at its budget (H200, 2026-11-28). The plan's
activation profile scores one slice (`runner/profile.py`), so the logits are counted.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from kvspill.kernels.gguf_gemv import MAX_GEMV_TOKENS
from kvspill.model.quant import QuantEmbedding, QuantLinear
from kvspill.runner.inputs import RunnerRequestState, StepInputs
from kvspill.types import PromptLogprobs, TokenLogprobs

SLICE_ROWS = 256


def slice_rows(lm_head: nn.Module | None, device: torch.device) -> int:
    """Rows scored at once: SLICE_ROWS, or MAX_GEMV_TOKENS for a GGUF lm_head on a GPU (the GEMV
    path, no dequantized copy of the weight)."""
    if device.type == "cuda" and isinstance(lm_head, (QuantLinear, QuantEmbedding)):
        return MAX_GEMV_TOKENS
    return SLICE_ROWS


def score_rows(compute_logits: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor) -> torch.Tensor:
    """[m, vocab] float32 logprobs of the next token for each row of `hidden` (one slice)."""
    return compute_logits(hidden).log_softmax(dim=-1)


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
    rows: int = SLICE_ROWS,
) -> dict[str, PromptLogprobs]:
    """hidden: [num_tokens, hidden_size] of the step. Scores each span's prompt tokens, `rows`
    (`slice_rows`) at a time."""
    out: dict[str, PromptLogprobs] = {}
    for req_id, row0, first, count in spans:
        prompt = states[req_id].sampling.prompt_token_ids
        k = states[req_id].sampling.params.prompt_logprobs or 0
        entries: list[TokenLogprobs] = []
        for off in range(0, count, rows):
            m = min(rows, count - off)
            logprobs = score_rows(compute_logits, hidden[row0 + off : row0 + off + m])  # [m, vocab]
            targets = prompt[first + off : first + off + m]
            target_ids = torch.tensor(targets, dtype=torch.long, device=logprobs.device).unsqueeze(1)
            chosen_t = logprobs.gather(1, target_ids)  # [m, 1]
            chosen = chosen_t.squeeze(1).tolist()
            ranks = ((logprobs > chosen_t).sum(dim=-1) + 1).tolist()  # ties share the better rank
            top_ids: list[list[int]] = [[] for _ in range(m)]
            top_vals: list[list[float]] = [[] for _ in range(m)]
            if k > 0:
                vals, ids = logprobs.topk(k, dim=-1)  # [m, k], best first
                top_vals, top_ids = vals.tolist(), ids.tolist()
            entries.extend(
                TokenLogprobs(token_id=t, logprob=lp, top=list(zip(ti, tv, strict=True)), rank=r)
                for t, lp, ti, tv, r in zip(targets, chosen, top_ids, top_vals, ranks, strict=True)
            )
        out[req_id] = PromptLogprobs(start=first, entries=entries)
    return out
