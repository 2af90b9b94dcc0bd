"""Paged attention for one step: the runner's implementation of the model's `AttentionFn`.

A step's tokens are ordered decodes first (one query each), then prefill chunks. Each layer
call stores the new K/V into the paged cache through `slot_mapping`, then runs the split-KV
decode kernel over the decode queries and the paged prefill kernel over the rest. On CUDA the
Triton kernels run; elsewhere their torch references (the same math, the tests' oracle).

Invariant: every tensor here lives on the cache's device; nothing in this module reads
global state, so the same object can be captured in a CUDA graph with static buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.prefill_attention import paged_prefill_attention, paged_prefill_attention_ref
from kvspill.kernels.store_kv import store_kv, store_kv_ref
from kvspill.kv.storage import KVStorage


@dataclass
class AttentionMetadata:
    """Tensors describing one step's attention (all on the KV device)."""

    slot_mapping: torch.Tensor  # [num_tokens] int64, -1 = padding (not stored)
    num_decodes: int  # the first num_decodes sequences (and tokens) are single-query decodes
    decode_block_tables: torch.Tensor  # [num_decodes, max_blocks_per_seq] int32
    decode_seq_lens: torch.Tensor  # [num_decodes] int32, context incl. the new token
    prefill_block_tables: torch.Tensor  # [num_prefills, max_blocks_per_seq] int32
    prefill_query_start_loc: torch.Tensor  # [num_prefills + 1] int32, relative to the first prefill token
    prefill_seq_lens: torch.Tensor  # [num_prefills] int32
    prefill_max_query_len: int = 0  # longest prefill chunk (saves the kernel a device sync)
    decode_num_splits: int | None = None  # fixed split count (CUDA graphs) or None = auto

    @property
    def num_prefills(self) -> int:
        return int(self.prefill_seq_lens.shape[0])


class PagedAttention:
    """Callable `(layer_idx, q, k, v) -> o` over a `KVStorage` for one step's metadata."""

    def __init__(self, storage: KVStorage, metadata: AttentionMetadata, scale: float) -> None:
        self.storage = storage
        self.metadata = metadata
        self.scale = scale
        self.use_triton = storage.device.type == "cuda"

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
        meta = self.metadata
        kv_layer = self.storage.layer(layer_idx)
        if self.use_triton:
            store_kv(k, v, kv_layer, meta.slot_mapping)
        else:
            store_kv_ref(k, v, kv_layer, meta.slot_mapping)
        out = torch.empty_like(q)
        nd = meta.num_decodes
        if nd:
            if self.use_triton:
                paged_decode_attention(
                    q[:nd], kv_layer, meta.decode_block_tables, meta.decode_seq_lens, self.scale,
                    num_splits=meta.decode_num_splits, out=out[:nd],
                )
            else:
                o, _ = paged_decode_attention_ref(
                    q[:nd], kv_layer, meta.decode_block_tables, meta.decode_seq_lens, self.scale
                )
                out[:nd] = o
        if meta.num_prefills:
            if self.use_triton:
                paged_prefill_attention(
                    q[nd:], kv_layer, meta.prefill_block_tables, meta.prefill_query_start_loc,
                    meta.prefill_seq_lens, self.scale, out=out[nd:],
                    max_query_len=meta.prefill_max_query_len or None,
                )
            else:
                o, _ = paged_prefill_attention_ref(
                    q[nd:], kv_layer, meta.prefill_block_tables, meta.prefill_query_start_loc,
                    meta.prefill_seq_lens, self.scale,
                )
                out[nd:] = o
        return out
