"""Why a request can never be scheduled on the tiers as sized, with what to change (pure Python).

`KVTierManager.never_fits_message` calls this; the scheduler fails such a request at once instead
of letting it wait forever."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvspill.kv.block_pool import KVRequest, cdiv

if TYPE_CHECKING:
    from kvspill.kv.tiers import KVTierManager


def never_fits_message(tiers: KVTierManager, request: KVRequest, num_computed_tokens: int) -> str | None:
    """Why the request can never be scheduled (with what to change), or None when it can."""
    bs, num_gpu = tiers.block_size, tiers.kv.num_blocks
    num_needed = cdiv(request.num_tokens, bs)
    if not tiers.enabled:
        if num_needed <= num_gpu:
            return None
        return (
            f"request {request.req_id} needs {num_needed} KV blocks for {request.num_tokens} tokens, "
            f"but the KV cache holds only {num_gpu} blocks ({num_gpu * bs} tokens). Lower "
            f"--max-model-len to at most {num_gpu * bs} or give the KV cache more memory."
        )
    num_total = num_gpu + tiers.cpu.num_blocks + tiers.disk.num_blocks
    if num_needed > num_total:
        return (
            f"request {request.req_id} needs {num_needed} KV blocks for {request.num_tokens} tokens, "
            f"but the gpu, cpu and disk tiers hold {num_gpu} + {tiers.cpu.num_blocks} + "
            f"{tiers.disk.num_blocks} blocks ({num_total * bs} tokens). Lower --max-model-len to at "
            f"most {num_total * bs} or give the cpu or disk tier more memory."
        )
    if tiers.max_num_new_tokens(request, num_computed_tokens) < 1:
        return (
            f"request {request.req_id} must keep its {tiers.num_sink_blocks} sink blocks and its last "
            f"{tiers.hot_window_tokens} tokens on the gpu, more than the {num_gpu} blocks "
            f"({num_gpu * bs} tokens) of the gpu tier. Lower --hot-window-tokens or "
            f"--num-sink-blocks, or give the gpu tier more memory."
        )
    return None
