"""Per-sequence grammar matchers and the batch's token bitmask, applied to the logits.

The runner gives each guided request a `GuideState` (its matcher). Before a step samples,
`guided_mask_logits` advances each guided row's matcher with the tokens sampled since the last
step (so the runner must have resolved them: `async_output`), fills one bitmask row per guided
sequence on the CPU, copies the [rows, ceil(vocab/32)] int32 words to the logits' device and
unpacks them there into -inf for every forbidden token.

Invariants:
- A matcher has accepted exactly `num_accepted` of the request's output tokens; a resumed
  request (preempted, re-created by the scheduler) replays its outputs into a fresh matcher.
- A token the matcher refuses is a broken invariant (it was sampled under the mask): raises.
- A terminated matcher (it accepted a stop token) allows every token: the request finishes on
  that stop token and an async step already in flight for it is discarded.
- A grammar can reach a state that no token of the vocabulary continues (a regex of characters
  the tokenizer spells only in pieces the grammar cannot take). Every logit would be -inf and the
  step would sample outside the grammar; instead the request is "stuck": only its stop tokens
  are allowed from then on, so it ends there (finish reason "stop", its text the grammar's
  prefix so far), with a warning in the log. Found by tests/server/test_fuzz.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import xgrammar as xgr

logger = logging.getLogger(__name__)

_ALL_ALLOWED = -1  # int32 with every bit set
_BITS: dict[torch.device, torch.Tensor] = {}  # arange(32) per device, made once


def to_device(values: torch.Tensor | list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Host values on `device` without a stream sync: a pageable copy (torch.tensor(..., device=cuda))
    waits for every kernel queued before it, here the step's forward; a pinned one does not."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


@dataclass
class GuideState:
    matcher: xgr.GrammarMatcher
    allowed_words: torch.Tensor | None = None  # a static mask ANDed in (JSON: no control bytes)
    num_accepted: int = 0
    stop_token_ids: tuple[int, ...] = field(default=())
    stuck: bool = False  # no token continues the grammar: only stop tokens (module docstring)

    def advance(self, output_token_ids: list[int]) -> None:
        for token in output_token_ids[self.num_accepted :]:
            if self.matcher.is_terminated() or self.stuck:
                break  # tokens after the stop token belong to a discarded async step
            if not self.matcher.accept_token(token):
                raise RuntimeError(f"guided decoding: token {token} was sampled outside the grammar")
            self.num_accepted += 1
        self.num_accepted = len(output_token_ids)


def fill_bitmask(
    guides: Sequence[GuideState | None], output_token_ids: Sequence[list[int]], rows: list[int], vocab: int
) -> torch.Tensor:
    """[len(rows), ceil(vocab/32)] int32 on the CPU: bit t of row j allows token t of guides[rows[j]],
    after that guide has accepted output_token_ids[rows[j]] (the request's outputs so far)."""
    words = (vocab + 31) // 32
    bitmask = torch.full((len(rows), words), _ALL_ALLOWED, dtype=torch.int32)
    for j, i in enumerate(rows):
        guide = guides[i]
        assert guide is not None
        guide.advance(output_token_ids[i])
        if guide.matcher.is_terminated():
            continue
        if not guide.stuck:
            guide.matcher.fill_next_token_bitmask(bitmask, j)
            if guide.allowed_words is not None:
                bitmask[j] &= guide.allowed_words
            if allows_nothing(bitmask[j], vocab):
                logger.warning(
                    "guided decoding: no token of the vocabulary continues the grammar after %d "
                    "tokens; the request stops there",
                    guide.num_accepted,
                )
                guide.stuck = True
        if guide.stuck:
            bitmask[j] = 0 if guide.stop_token_ids else _ALL_ALLOWED
            for t in guide.stop_token_ids:
                if t < vocab:
                    bitmask[j, t // 32] |= bit_word(t % 32)
    return bitmask


def bit_word(i: int) -> int:
    """int32 word with bit i set (bit 31 is the sign bit); `~bit_word(i)` clears it."""
    return -(2**31) if i == 31 else 1 << i


def allowed_tokens(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """bool [..., vocab]: the tokens that bitmask words [..., ceil(vocab/32)] int32 allow."""
    bits = _BITS.get(bitmask.device)
    if bits is None:
        bits = _BITS[bitmask.device] = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    unpacked = ((bitmask.unsqueeze(-1) >> bits) & 1).bool()
    return unpacked.view(*bitmask.shape[:-1], -1)[..., :vocab]


def allows_nothing(row: torch.Tensor, vocab: int) -> bool:
    """Whether a bitmask row [ceil(vocab/32)] int32 allows none of the vocab's tokens."""
    return not bool(allowed_tokens(row, vocab).any())


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """A copy of logits [num_seqs, vocab] with the forbidden tokens of `rows` at -inf."""
    vocab = logits.shape[1]
    device = logits.device
    allowed = allowed_tokens(to_device(bitmask, torch.int32, device), vocab)
    out = logits.clone()
    if len(rows) == logits.shape[0]:
        return out.masked_fill_(~allowed, float("-inf"))
    idx = to_device(rows, torch.long, device)
    out.index_copy_(0, idx, out.index_select(0, idx).masked_fill_(~allowed, float("-inf")))
    return out


def guided_mask_logits(
    logits: torch.Tensor, guides: Sequence[GuideState | None], output_token_ids: Sequence[list[int]]
) -> torch.Tensor:
    """`logits` [num_seqs, vocab] with every guided row masked to its grammar (itself when no row is
    guided); row i's guide is guides[i] (None: not guided), its outputs so far output_token_ids[i]."""
    rows = [i for i, guide in enumerate(guides) if guide is not None]
    if not rows:
        return logits
    return apply_bitmask(logits, fill_bitmask(guides, output_token_ids, rows, logits.shape[1]), rows)
