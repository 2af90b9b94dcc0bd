"""Why a request can never be scheduled on the tiers as sized, with what to change (pure Python).

`KVTierManager.never_fits_message` asks these with a `TierSizes` record of its current sizes; the
scheduler fails such a request at once instead of letting it wait forever.

Invariants: the messages read plain numbers only (never the manager), and each one names the
flag to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspill.kv.block_pool import KVRequest, cdiv


@dataclass(frozen=True)
class TierSizes:
    """Blocks per tier now (a cold tier retires blocks, so this is read at the time of asking) and
    the placement knobs that keep blocks on the gpu tier."""

    block_size: int  # tokens per block
    num_gpu_blocks: int
    num_cpu_blocks: int  # 0: no cpu tier
    num_disk_blocks: int  # 0: no disk tier
    num_sink_blocks: int
    hot_window_tokens: int

    @property
    def has_cold_tiers(self) -> bool:
        return self.num_cpu_blocks + self.num_disk_blocks > 0


def too_many_blocks_message(sizes: TierSizes, request: KVRequest) -> str | None:
    """Why the request needs more blocks than every tier together holds, or None when it does not."""
    bs, num_gpu = sizes.block_size, sizes.num_gpu_blocks
    num_needed = cdiv(request.num_tokens, bs)
    if not sizes.has_cold_tiers:
        if num_needed <= num_gpu:
            return None
        return (
            f"request {request.req_id} needs {num_needed} KV blocks for {request.num_tokens} tokens, "
            f"but the KV cache holds only {num_gpu} blocks ({num_gpu * bs} tokens). Lower "
            f"--max-model-len to at most {num_gpu * bs} or give the KV cache more memory."
        )
    num_total = num_gpu + sizes.num_cpu_blocks + sizes.num_disk_blocks
    if num_needed <= num_total:
        return None
    return (
        f"request {request.req_id} needs {num_needed} KV blocks for {request.num_tokens} tokens, "
        f"but the gpu, cpu and disk tiers hold {num_gpu} + {sizes.num_cpu_blocks} + "
        f"{sizes.num_disk_blocks} blocks ({num_total * bs} tokens). Lower --max-model-len to at "
        f"most {num_total * bs} or give the cpu or disk tier more memory."
    )


def hot_blocks_message(sizes: TierSizes, request: KVRequest) -> str:
    """The request's sinks and hot window alone overflow the gpu tier (the caller found that no
    step of it can write a token)."""
    num_gpu, bs = sizes.num_gpu_blocks, sizes.block_size
    return (
        f"request {request.req_id} must keep its {sizes.num_sink_blocks} sink blocks and its last "
        f"{sizes.hot_window_tokens} tokens on the gpu, more than the {num_gpu} blocks "
        f"({num_gpu * bs} tokens) of the gpu tier. Lower --hot-window-tokens or "
        f"--num-sink-blocks, or give the gpu tier more memory."
    )
