"""Context shift (`--context-shift`, llama.cpp's): a sequence that reaches max_model_len drops a
middle part of its context and goes on generating (pure Python: the block bookkeeping; the
runner turns the kept keys, `kernels/rope_shift.py`).

The rule, with B the block size and L the context's tokens when it is full (max_model_len):
- kept at the start: the sink tokens, S = num_sink_blocks * B (the request's own window's, else
  --num-sink-blocks): they keep their positions and their KV as it is;
- kept at the end: at least `keep` recent tokens (--context-shift-keep; 0: half of what follows
  the sinks, as llama.cpp discards half);
- dropped: D = the largest multiple of B <= L - S - keep (at least one block), the oldest tokens
  after the sinks. Whole blocks, so a kept token keeps its slot: its block leaves the middle of
  the table and its key turns back by D positions (exact: RoPE's angles are linear in the
  position). A kept block shared with another request is copied first (copy on write).
- overlap (--context-shift-overlap): the last `overlap` kept tokens are computed again at their
  new positions instead of turned, so their KV sees only the kept context (a sliding window's
  overlap, re-read); with overlap >= keep every kept token after the sinks is recomputed and the
  next tokens are those of a fresh run on the kept tokens.

What a turned key is not: the key a fresh prefill of the kept tokens would compute. Past the
first layer a kept token's K and V were computed while it saw the dropped tokens (llama.cpp's
shift has the same property); `overlap` trades compute for that.

Refused (at start, or as a 400 for a request that asks for it): any cold tier (cpu, disk, or
--attention cpu, which runs through the tiers), since a kept block there would need its bytes
turned where they live. A request with prompt_logprobs never shifts (its prompt is scored once).
"""

from __future__ import annotations

from kvspill.errors import InvalidParameterError
from kvspill.kv.block_pool import KVCacheManager
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.request import Request
from kvspill.types import ContextShift

COLD_TIERS_MESSAGE = (
    "context shift needs all KV in the GPU tier (a kept block in the cpu or disk tier would have to "
    "turn where it lives): start with --cpu-kv-budget 0 --disk-kv-budget 0 (and --attention auto), "
    "or leave --context-shift off"
)


class ShiftRefused(Exception):
    """This shift cannot be done (nothing to drop, or no block for a copy): the request ends
    with finish_reason "length" as without context shift."""


def resolves_on(params: SamplingParams, engine_default: bool, has_cold_tiers: bool) -> bool:
    """Whether a request shifts its context: its own `context_shift`, else the engine's flag.
    Raises InvalidParameterError when it asks for a shift the engine cannot do."""
    asked = params.context_shift if params.context_shift is not None else engine_default
    if asked and has_cold_tiers:  # the engine's own flag was refused at start (engine/checks.py)
        raise InvalidParameterError("context_shift", COLD_TIERS_MESSAGE)
    return asked and params.prompt_logprobs is None


def num_tokens_to_drop(num_tokens: int, num_sink_tokens: int, keep: int, block_size: int) -> int:
    """D of the module's rule: whole blocks, at least one, leaving at least `keep` recent tokens
    (0: half of what follows the sinks)."""
    after_sinks = num_tokens - num_sink_tokens
    keep = keep or after_sinks // 2
    return max((after_sinks - keep) // block_size, 1) * block_size


def shift_context(
    request: Request, kv: KVCacheManager, num_sink_blocks: int, keep: int, overlap: int
) -> ContextShift | None:
    """Drop the middle of a full context: the request's tokens, hashes, computed count and blocks.
    Returns what the runner must do (None for a request holding no blocks: a waiting one is
    recomputed); raises ShiftRefused, changing nothing, when no whole block can go or the copies
    of shared kept blocks do not fit the pool."""
    block_size = kv.block_size
    num_sink_tokens = num_sink_blocks * block_size
    drop = num_tokens_to_drop(request.num_tokens, num_sink_tokens, keep, block_size)
    if num_sink_tokens + drop >= request.num_tokens:
        raise ShiftRefused(f"request {request.req_id}: no whole block after the sinks to drop")
    held = len(kv.get_blocks(request.req_id))
    pairs: list[tuple[int, int]] | None = []
    if held:
        stop = num_sink_blocks + drop // block_size
        pairs = kv.drop_blocks(request.req_id, num_sink_blocks, min(stop, held))
        if pairs is None:
            raise ShiftRefused(f"request {request.req_id}: no free KV block to copy a shared kept block into")
    computed = request.num_computed_tokens
    request.drop_context(num_sink_tokens, drop)
    # KV of the kept tokens: what was computed past the dropped part, moved down
    num_kv_tokens = computed - drop if computed >= num_sink_tokens + drop else min(computed, num_sink_tokens)
    recompute_from = max(request.num_tokens - 1 - overlap, num_sink_tokens)
    request.num_computed_tokens = min(num_kv_tokens, recompute_from)
    if not held:
        return None
    return ContextShift(
        req_id=request.req_id,
        num_sink_tokens=num_sink_tokens,
        num_dropped_tokens=drop,
        block_ids=kv.get_block_ids(request),
        rotations=pairs or [],
        num_kv_tokens=num_kv_tokens,
    )


def check_shift_flags(
    max_model_len: int, block_size: int, num_sink_blocks: int, keep: int, overlap: int
) -> None:
    """The flags leave at least one block to drop when the context is full."""
    room = max_model_len - num_sink_blocks * block_size - block_size
    if keep < 0 or overlap < 0:
        raise InvalidParameterError(
            "context_shift_keep", "--context-shift-keep and --context-shift-overlap must not be negative"
        )
    if keep > room:
        raise InvalidParameterError(
            "context_shift_keep",
            f"--context-shift-keep {keep} leaves no block to drop: at most {room} with --max-model-len "
            f"{max_model_len}, --num-sink-blocks {num_sink_blocks} and --block-size {block_size}",
        )
