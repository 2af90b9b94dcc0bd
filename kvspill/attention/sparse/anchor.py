"""Prompt-guided block selection for sparse cold attention (`--sparse-prompt-window`).

A decode step's query asks about the next token only. Right after `def ` or `# `, the query of a
code model is generic, and the cold block that holds the definition the prompt asked about scores
no higher than any other: exact attention finds that block through the question, which sits in
the hot window; sparse attention (`attention/cold/sparse.py`) never fetches it. Measured with
`kvspill eval` on SmolLM2 (code task, 2K tokens, budget 1/8, 360 samples): 3.6 points under
exact, every lost sample lost in the first tokens of the answer (bench/results/2026-11-29-cpu-code-2k-seed1/).

SnapKV's observation: the queries of the prompt's last tokens (the question) attend to the part
of the context the answer needs. So part of the budget, `share`, goes to the cold blocks those
queries pick, the *anchor blocks*; the rest goes to the step's own choice as before:

- capture: during prefill, the queries (after RoPE, in the basis the kernels see) of the
  prompt's last `window` positions of each request, every layer, go to a host buffer (pinned on
  CUDA: the copy does not stop the stream);
- anchors: per layer, the scores of the request's cold blocks against those rows
  (`sparse_select.block_scores`, the maximum over the rows and the GQA group), the best
  `anchor_blocks` blocks by the usual union of the kv heads' rankings. Recomputed when the
  sequence's cold blocks change (a new block goes cold every `block_size` steps), not per step;
- selection: the anchor blocks' ranking keys are raised above every real score
  (`boost_keys`), so every kv head ranks them first and the usual selection keeps them plus the
  budget's remaining blocks by the step's query. One list of blocks, as before: the gather,
  the block cache and the CUDA graphs do not change.

Switch: `window = 0` (the default of `ColdAttentionConfig`) selects by the step's query alone.
A budget of at least the cold length still selects every block (exact). Deterministic given the
inputs, like the rest of the selection. Memory: window x layers x heads x head_dim values per
running request, on the host (W3: 32 x 32 x 32 x 128 x 2 bytes = 8 MiB).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.attention.cold.config import ColdAttentionConfig
from kvspill.attention.sparse.select import block_scores, select_from_keys
from kvspill.kernels.sparse_kernels import ranking_keys
from kvspill.storage.storage import KVStorage

# Above the high half of every real ranking key: the score's top SCORE_BITS bits of the largest
# finite float are 0x7F7FF000 (inf 0x7F800000, NaN 0x7FC00000); the block selection's bitwise
# searches read those 20 bits only, so the anchor mark keeps the low 12 bits clear.
ANCHOR_HIGH = 0x7FFFF000 << 32
_LOW_MASK = 0xFFFFFFFF
# Blocks scored at once when the anchors are chosen (W3: 16 MiB of summaries, 32 MiB of scores)
_SCORE_CHUNK_BLOCKS = 4096


def boost_keys(keys: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """Ranking keys [num_kv_heads, n] with the blocks where `anchor` [n] (bool) is set raised above
    every other block in every head, their order among themselves by block index (the low half)."""
    return torch.where(anchor, (keys & _LOW_MASK) | ANCHOR_HIGH, keys)


def cold_set_key(block_index: np.ndarray | None, block_ids: np.ndarray) -> tuple[int, int]:
    """What names a sequence's cold set for `PromptAnchors.masks`: its length and its last
    logical block (the tier id of the last block where the logical numbers are not known)."""
    last = int(block_index[-1]) if block_index is not None else -1 - int(block_ids[-1])
    return len(block_ids), last


def anchor_blocks(share: float, budget_blocks: int) -> int:
    """Blocks of the budget the prompt's queries choose: at least one when `share` > 0."""
    return 0 if share <= 0 else max(1, min(budget_blocks, round(share * budget_blocks)))


@dataclass
class _Request:
    filled: np.ndarray  # [window] bool: positions captured so far
    queries: torch.Tensor | None = None  # [num_layers, window, num_heads, head_dim] on the host
    masks: torch.Tensor | None = None  # [num_layers, num_cold] bool on the device
    key: tuple[int, int] | None = None  # (num_cold, last cold logical block) the masks are for


class PromptAnchors:
    """The captured prompt queries and anchor masks of every request (see the module docstring)."""

    def __init__(self, num_layers: int, window: int, share: float, budget_blocks: int, device: torch.device):
        self.num_layers = num_layers
        self.window = window
        self.num_anchor = anchor_blocks(share, budget_blocks)
        self.device = device
        self.pin = device.type == "cuda"
        self.requests: dict[str, _Request] = {}

    @classmethod
    def of(cls, config: ColdAttentionConfig, storage: KVStorage, budget_blocks: int) -> PromptAnchors | None:
        """The anchors `config` asks for (`sparse_prompt_window` > 0), else None."""
        if not config.sparse_prompt_window:
            return None
        window, share = config.sparse_prompt_window, config.sparse_prompt_share
        return cls(storage.layout.num_layers, window, share, budget_blocks, storage.device)

    # ---- capture (prefill) -----------------------------------------------------------------

    def capture_plan(self, prompt_len: int, start: int, num_tokens: int, row0: int):
        """(step rows, window slots) of the chunk [start, start + num_tokens) of a request's
        prompt that fall in its last `window` positions; None when none do. `row0`: the chunk's
        first row in the step."""
        first = max(0, prompt_len - self.window)
        lo, hi = max(start, first), min(start + num_tokens, prompt_len)
        if lo >= hi:
            return None
        positions = np.arange(lo, hi)
        return row0 + positions - start, positions - first

    def begin_capture(self, req_id: str, slots: np.ndarray) -> _Request:
        """The request's entry, its `slots` marked captured (a re-prefill after preemption
        overwrites them); the buffer comes with the first layer's q (`AnchorCapture.store`)."""
        entry = self.requests.setdefault(req_id, _Request(np.zeros(self.window, bool)))
        entry.filled[slots] = True
        entry.masks, entry.key = None, None
        return entry

    def release(self, req_id: str) -> None:
        self.requests.pop(req_id, None)

    # ---- anchors (decode) ------------------------------------------------------------------

    def masks(
        self,
        req_id: str | None,
        key: tuple[int, int],
        num_selected: int,
        summary: Callable[[int, int, int], torch.Tensor],
    ) -> torch.Tensor | None:
        """[num_layers, num_cold] bool on the device: each layer's anchor blocks among the
        sequence's cold blocks (logical order), or None when the request has none (no capture,
        or the budget covers every cold block). `summary(layer, lo, hi)` gives the summaries of
        cold blocks lo..hi-1 [hi - lo, 2, num_kv_heads, head_dim]; `key` names the cold set."""
        entry = self.requests.get(req_id) if req_id is not None else None
        num_cold = key[0]
        if entry is None or entry.queries is None or self.num_anchor == 0 or num_selected >= num_cold:
            return None
        if entry.key == key and entry.masks is not None:
            return entry.masks
        # to the device first: the host must not read the buffer (its copies from the device
        # are queued on the stream); this copy comes after them on the same stream
        rows = torch.from_numpy(np.flatnonzero(entry.filled)).to(self.device)
        queries = entry.queries.to(self.device, non_blocking=True).index_select(1, rows)
        masks = torch.zeros((self.num_layers, num_cold), dtype=torch.bool, device=self.device)
        count = min(self.num_anchor, num_selected)
        for layer in range(self.num_layers):
            # scored a chunk of blocks at a time: bounded temporaries at any context (W3 at 1M
            # has 65,536 cold blocks: 256 MiB of summaries per layer)
            scores = torch.cat(
                [
                    block_scores(queries[layer], summary(layer, lo, min(lo + _SCORE_CHUNK_BLOCKS, num_cold)))
                    for lo in range(0, num_cold, _SCORE_CHUNK_BLOCKS)
                ],
                dim=1,
            )
            masks[layer, select_from_keys(ranking_keys(scores), count)] = True
        entry.masks, entry.key = masks, key
        return masks


class AnchorCapture:
    """One prefill step's capture: `store(layer_idx, q)` from the attention of every layer."""

    def __init__(self, anchors: PromptAnchors, parts: list[tuple[_Request, torch.Tensor, int]]):
        self.anchors = anchors
        self.parts = parts  # (request entry, step rows on q's device, first window slot)

    def store(self, layer_idx: int, q: torch.Tensor) -> None:
        """Copy the captured rows of this layer's q [num_tokens, num_heads, head_dim] to the host."""
        for entry, rows, slot in self.parts:
            shape = (self.anchors.num_layers, self.anchors.window, *q.shape[1:])
            if entry.queries is None or entry.queries.shape != shape or entry.queries.dtype != q.dtype:
                entry.queries = torch.zeros(shape, dtype=q.dtype, pin_memory=self.anchors.pin)
            dst = entry.queries[layer_idx, slot : slot + rows.shape[0]]
            dst.copy_(q.index_select(0, rows), non_blocking=True)


def build_capture(
    anchors: PromptAnchors, chunks: list[tuple[str, int, int, int, int]], device: torch.device
) -> AnchorCapture | None:
    """The step's capture from its prefill chunks (req_id, prompt_len, start, num_tokens, first
    row); None when no chunk reaches its prompt's last `window` positions."""
    parts = []
    for req_id, prompt_len, start, num_tokens, row0 in chunks:
        plan = anchors.capture_plan(prompt_len, start, num_tokens, row0)
        if plan is None:
            continue
        rows, slots = plan  # consecutive positions: consecutive rows and slots
        entry = anchors.begin_capture(req_id, slots)
        parts.append((entry, torch.from_numpy(rows).to(device), int(slots[0])))
    return AnchorCapture(anchors, parts) if parts else None
