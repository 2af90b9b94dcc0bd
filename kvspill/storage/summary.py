"""Block summaries for sparse cold attention: per cold block, layer and KV head, the per-channel
minimum and maximum of the block's keys (Quest, Tang et al. 2024).

They live on the compute device (the GPU on CUDA) so that scoring every cold block of a
sequence costs two small matmuls per layer there (`attention/sparse/select.py`); only the blocks that
score well are then fetched. One summary is 2 x head_dim values per (layer, kv head) in the KV
dtype (`summary_dtype`: fp16 for int8 pools, whose keys are summarized after dequantizing):
`bytes_per_block(layout)`, about 1 / block_size of the block's KV bytes (1/16 with 16-token
blocks; about 2/16 for int8), counted by the planner (`plan/sparse.py`).

Indexed like the KV pools: `tensor(tier)[block_id]` for the cpu and disk tiers. Written when a
block goes cold (`KVTransferEngine.execute` calls `on_copy` for each run of moves): from the gpu
source block's keys on gpu->cold moves, copied along on cold->cold moves; moves to the gpu need
nothing (a hot block is attended exactly). `valid` says which ids hold a summary; a block that
reached a cold tier another way (tests, calibration) is summarized from its host copy on first
use (`ensure`).

Invariant: summaries are written on the same stream as the copies of the plan (the copy stream
on CUDA), so they are ready when the compute stream passes the plan's end event.
"""

from __future__ import annotations

import numpy as np
import torch

from kvspill.kernels.kv_quant import int8_planes
from kvspill.kernels.uva_gather import index_copy_rows
from kvspill.storage.layout import element_size
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

# Blocks summarized per reduction: bounds the temporaries (an fp8 pool's keys widened to fp32:
# 16 x 32 layers x 16 x 8 x 128 x 4 B = 32 MiB for Llama-3.1-8B) whatever the length of a run of
# moves; they are not in the plan's activation reserve.
_CHUNK_BLOCKS = 16
_REDUCE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def summary_dtype(kv_dtype: torch.dtype) -> torch.dtype:
    """The summaries' dtype: the pool's, except fp16 for int8 pools (values = int8 x fp32 scale:
    fp16 keeps 11 bits of each bound, plenty to rank blocks, at half of fp32's bytes)."""
    return torch.float16 if kv_dtype == torch.int8 else kv_dtype


def layout_summary_dtype(layout: KVLayout) -> torch.dtype:
    """The summaries' dtype of a pool: `summary_dtype` of its format; for a mixed pool
    (storage/layout.py) that of the skipped layers' model dtype, which also holds the quantized layers'
    bounds (fp8 values exactly, int8 ones rounded as fp16 would)."""
    if not layout.mixed:
        return summary_dtype(layout.dtype)
    kept = next(d for d in layout.layer_dtypes if d != layout.dtype)
    return summary_dtype(kept)


def bytes_per_block(layout: KVLayout) -> int:
    """Summary bytes of one cold block (all layers): min and max of K per channel and kv head."""
    elem = element_size(layout_summary_dtype(layout))
    return layout.num_layers * 2 * layout.num_kv_heads * layout.head_dim * elem


def summarize_keys(blocks: torch.Tensor) -> torch.Tensor:
    """[n, num_layers, 2, block_size, num_kv_heads, row_dim] KV blocks ->
    [n, num_layers, 2, num_kv_heads, head_dim] (dim 2: 0 = min, 1 = max of K over the block's
    tokens), in `summary_dtype`; int8 keys are dequantized first (their rows' scales differ)."""
    if blocks.dtype == torch.int8:  # whole regions: int8_planes, then K's plane
        values, scales = int8_planes(blocks)
        keys = values[:, :, 0].float() * scales[:, :, 0, ..., None]
    else:
        keys = blocks[:, :, 0]  # [n, num_layers, block_size, num_kv_heads, head_dim]
    if keys.dtype not in _REDUCE_DTYPES:  # fp8: min/max after widening
        keys = keys.float()
    lo, hi = keys.amin(dim=2), keys.amax(dim=2)
    # min and max of values of the pool's dtype are values of that dtype: the cast back is exact
    # (int8: rounded to fp16, see summary_dtype).
    return torch.stack([lo, hi], dim=2).to(summary_dtype(blocks.dtype))


def summarize_blocks(layout: KVLayout, blocks: torch.Tensor) -> torch.Tensor:
    """`summarize_keys` of whole blocks of a pool of `layout` ([n, *layout.block_shape]), in
    `layout_summary_dtype`: a mixed pool's layers one by one, each in its own format."""
    if not layout.mixed:
        return summarize_keys(blocks)
    dtype = layout_summary_dtype(layout)
    layers = [summarize_keys(layout.pool_layer(blocks, i)[:, None])[:, 0] for i in range(layout.num_layers)]
    return torch.stack([x.to(dtype) for x in layers], dim=1)


class BlockSummaries:
    """The summaries of every cpu- and disk-tier block id (see the module docstring)."""

    def __init__(self, storage: TieredKVStorage) -> None:
        layout = storage.layout
        self.storage = storage
        self.dtype = layout_summary_dtype(layout)
        shape = (layout.num_layers, 2, layout.num_kv_heads, layout.head_dim)
        # per tier: [num_tier_blocks, num_layers, 2, num_kv_heads, head_dim] on the compute device
        self.tensors = {
            tier: torch.zeros((n, *shape), dtype=self.dtype, device=storage.device)
            for tier, n in ((TIER_CPU, storage.num_cpu_blocks), (TIER_DISK, storage.num_disk_blocks))
        }
        self.valid = {tier: np.zeros(t.shape[0], dtype=bool) for tier, t in self.tensors.items()}
        self.num_spilled = 0  # blocks summarized from the gpu at spill time
        self.num_late = 0  # blocks summarized from their host copy on first use

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def layer(self, tier: int, layer_idx: int) -> torch.Tensor:
        """[num_tier_blocks, 2, num_kv_heads, head_dim] of one layer (strided view)."""
        return self.tensors[tier][:, layer_idx]

    def on_copy(self, src_tier: int, src_start: int, dst_tier: int, dst_start: int, num_blocks: int) -> None:
        """A run of `num_blocks` blocks is copied from src to dst ids: keep the summaries along."""
        if dst_tier == TIER_GPU:
            return
        dst = self.tensors[dst_tier]
        if src_tier == TIER_GPU:
            src_pool = self.storage.kv_cache
            for c0 in range(0, num_blocks, _CHUNK_BLOCKS):
                n = min(_CHUNK_BLOCKS, num_blocks - c0)
                blocks = src_pool[src_start + c0 : src_start + c0 + n]
                dst[dst_start + c0 : dst_start + c0 + n] = summarize_blocks(self.storage.layout, blocks)
            self.valid[dst_tier][dst_start : dst_start + num_blocks] = True
            self.num_spilled += num_blocks
            return
        src = self.tensors[src_tier][src_start : src_start + num_blocks]
        dst[dst_start : dst_start + num_blocks] = src.clone() if src_tier == dst_tier else src
        was_valid = self.valid[src_tier][src_start : src_start + num_blocks].copy()
        self.valid[dst_tier][dst_start : dst_start + num_blocks] = was_valid

    def ensure(self, tier: int, block_ids: np.ndarray) -> None:
        """Summarize the blocks of `block_ids` that have none yet, from their host copy (the caller
        has waited for async copies into the cpu pool)."""
        missing = block_ids[~self.valid[tier][block_ids]]
        if len(missing) == 0:
            return
        for c0 in range(0, len(missing), _CHUNK_BLOCKS):
            ids = torch.from_numpy(np.ascontiguousarray(missing[c0 : c0 + _CHUNK_BLOCKS], dtype=np.int64))
            blocks = self.storage.read_blocks(tier, ids.numpy())  # disk: file reads
            summary = summarize_blocks(self.storage.layout, blocks)
            index_copy_rows(self.tensors[tier], ids.to(self.storage.device), summary.to(self.storage.device))
        self.valid[tier][missing] = True
        self.num_late += len(missing)
