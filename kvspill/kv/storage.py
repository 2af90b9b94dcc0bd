"""KV cache storage: the tensors that hold K and V for every block (runner side, torch).

Layout: one tensor `kv_cache: [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]`
(dim 2: 0 = K, 1 = V). All layers of one block are contiguous, so a block moves between tiers
as one copy of `block_bytes` (2 MiB for Llama-3.1-8B in bf16 with 16-token blocks: the size
PCIe copies like). Attention kernels take the strided per-layer view `layer(l)`.

Invariant: the scheduler's block ids index dim 0 directly; this module never decides which
block holds what.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVLayout:
    num_layers: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * elem

    @property
    def block_bytes(self) -> int:
        return self.bytes_per_token * self.block_size


class KVStorage:
    """The device-resident KV pool: `num_blocks` blocks of `layout`."""

    def __init__(self, layout: KVLayout, num_blocks: int, device: torch.device) -> None:
        self.layout = layout
        self.num_blocks = num_blocks
        self.device = device
        # kv_cache: [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]
        self.kv_cache = torch.zeros(
            (num_blocks, layout.num_layers, 2, layout.block_size, layout.num_kv_heads, layout.head_dim),
            dtype=layout.dtype,
            device=device,
        )

    def layer(self, layer_idx: int) -> torch.Tensor:
        """[num_blocks, 2, block_size, num_kv_heads, head_dim], strided (not contiguous in dim 0)."""
        return self.kv_cache[:, layer_idx]

    @property
    def nbytes(self) -> int:
        return self.kv_cache.numel() * self.kv_cache.element_size()
