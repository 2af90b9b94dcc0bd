"""vLLM's token bans: `allowed_token_ids` (every other token -inf) and `bad_words`.

A bad word is a token sequence (the engine tokenizes each word bare and after a space:
`bad_word_sequences`). Its last token is banned at a step where the output so far ends with the
rest of the sequence, so a one-token word is banned at every step and a longer one only where it
would be completed. Only the output is looked at, not the prompt (as vLLM does): a word the prompt
ends half-way is not completed by the output's first token either way.

Invariants: the input logits are never modified; a row without bans is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from kvspill.guided.bitmask import to_device
from kvspill.sampling_params import SamplingParams

_NEG_INF = float("-inf")


def bad_word_sequences(
    words: Sequence[str], encode: Callable[[str], list[int]]
) -> tuple[tuple[int, ...], ...]:
    """Each word's token ids at the start of a text and after a space, without repeats.

    `encode` tokenizes without special tokens. A word whose two tokenizations are equal (a
    tokenizer without a leading-space marker) is listed once.
    """
    out: list[tuple[int, ...]] = []
    for word in words:
        bare = word.lstrip()
        for text in (bare, " " + bare):
            ids = tuple(encode(text))
            if ids and ids not in out:
                out.append(ids)
    return tuple(out)


def banned_tokens(params: SamplingParams, output_token_ids: Sequence[int]) -> list[int]:
    """The tokens `bad_words` bans at this step for a row with these outputs."""
    banned = []
    n = len(output_token_ids)
    for word in params.bad_words_token_ids:
        prefix_len = len(word) - 1
        if prefix_len > n:
            continue
        if prefix_len == 0 or tuple(output_token_ids[n - prefix_len :]) == word[:-1]:
            banned.append(word[-1])
    return banned


def apply_token_bans(
    logits: torch.Tensor, params: Sequence[SamplingParams], outputs: Sequence[Sequence[int]]
) -> torch.Tensor:
    """logits: [num_rows, vocab] (not modified); row i has params[i] and outputs[i]. Returns a
    new tensor with the banned tokens at -inf, or `logits` when no row has a ban."""
    allowed_rows = [i for i, p in enumerate(params) if p.allowed_token_ids is not None]
    ban_rows: list[int] = []
    ban_tokens: list[int] = []
    for i, (p, out) in enumerate(zip(params, outputs, strict=True)):
        for token in banned_tokens(p, out):
            ban_rows.append(i)
            ban_tokens.append(token)
    if not allowed_rows and not ban_rows:
        return logits
    device = logits.device
    out_logits = logits.clone()
    if allowed_rows:
        keep = torch.zeros(len(allowed_rows), logits.shape[1], dtype=torch.bool, device=device)
        rows = [r for r, i in enumerate(allowed_rows) for _ in params[i].allowed_token_ids or ()]
        cols = [t for i in allowed_rows for t in params[i].allowed_token_ids or ()]
        keep[to_device(rows, torch.long, device), to_device(cols, torch.long, device)] = True
        row_idx = to_device(allowed_rows, torch.long, device)
        out_logits.index_copy_(0, row_idx, out_logits.index_select(0, row_idx).masked_fill(~keep, _NEG_INF))
    if ban_rows:
        idx = (to_device(ban_rows, torch.long, device), to_device(ban_tokens, torch.long, device))
        out_logits.index_put_(idx, torch.tensor(_NEG_INF, dtype=logits.dtype, device=device))
    return out_logits
