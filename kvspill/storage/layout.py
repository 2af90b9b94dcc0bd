"""The per-block layout of the KV pools, and the views of one layer in it.

A block holds every layer's K and V of `block_size` tokens, layer after layer, so a block moves
between tiers as one copy of `block_bytes`.

- **Uniform pools** (one storage format in every layer, the usual case): a pool is a tensor
  `[num_blocks, num_layers, 2, block_size, num_kv_heads, row_dim]` of `dtype` (row_dim = head_dim,
  or head_dim + 4 for int8, whose block regions hold a value plane and a plane of fp32 row
  scales, kernels/kv_quant.py). Layer l is the strided view `pool[:, l]`.
- **Mixed pools** (`--kv-cache-dtype-skip-layers`: the listed layers keep the model dtype, the
  others take `--kv-cache-dtype`): layers differ in element size and row, so a pool is raw bytes
  `[num_blocks, block_bytes]` uint8 and layer l is a typed view of its byte region
  `[num_blocks, 2, block_size, num_kv_heads, row_dim_of(l)]` of `dtype_of(l)`. Every kernel
  reads a layer through such a view (its dtype and strides), so it sees an ordinary pool.

Staging buffers that hold one layer of some blocks at a time (the stream path, the CPU path's
disk reads) follow the same rule: typed `[n, 2, block_size, num_kv_heads, row_dim]` when uniform,
raw bytes `[n, max_layer_bytes]` viewed per layer when mixed (`staged_layer`).

Invariant: with no skipped layer the layout, every pool and every view are exactly those of a
uniform pool (`layer_dtypes` is empty), so the common case pays nothing for mixed pools.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.kernels.kv_quant import kv_storage_dtype
from kvspill.kernels.kv_quant import row_dim as stored_row_dim


@functools.cache
def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class KVLayout:
    num_layers: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype  # the storage format (--kv-cache-dtype) of every layer not skipped
    # Mixed pools only: each layer's storage dtype (skipped layers: the model dtype); empty when
    # every layer stores `dtype` (see the module docstring).
    layer_dtypes: tuple[torch.dtype, ...] = ()

    def __post_init__(self) -> None:
        if self.layer_dtypes:
            assert len(self.layer_dtypes) == self.num_layers, "one storage dtype per layer"
            assert len(set(self.layer_dtypes)) > 1, "a mixed layout has two formats (else pass none)"

    @property
    def mixed(self) -> bool:
        return bool(self.layer_dtypes)

    def dtype_of(self, layer_idx: int) -> torch.dtype:
        return self.layer_dtypes[layer_idx] if self.layer_dtypes else self.dtype

    def row_dim_of(self, layer_idx: int) -> int:
        return stored_row_dim(self.head_dim, self.dtype_of(layer_idx))

    @property
    def row_dim(self) -> int:
        """Elements of one stored (token, kv head) row of a uniform pool: head_dim, plus its scale
        for int8 (kernels/kv_quant.py): the pools' last dim. Mixed pools: `row_dim_of(layer)`."""
        assert not self.mixed, "a mixed pool's rows differ by layer: row_dim_of(layer)"
        return stored_row_dim(self.head_dim, self.dtype)

    def layer_shape(self, layer_idx: int) -> tuple[int, int, int, int]:
        """One layer of one block: (2, block_size, num_kv_heads, row_dim_of(layer))."""
        return (2, self.block_size, self.num_kv_heads, self.row_dim_of(layer_idx))

    def layer_bytes(self, layer_idx: int) -> int:
        """Bytes of one layer of one block (K and V, with int8's scales)."""
        return self.layer_offsets[layer_idx + 1] - self.layer_offsets[layer_idx]

    @property
    def layer_offsets(self) -> tuple[int, ...]:
        """Byte offset of each layer's region within a block, and the block's bytes at the end."""
        return _layer_offsets(self)

    @property
    def max_layer_bytes(self) -> int:
        return max(self.layer_bytes(layer) for layer in range(self.num_layers))

    @property
    def block_bytes(self) -> int:
        return self.layer_offsets[-1]

    @property
    def bytes_per_token(self) -> int:
        return self.block_bytes // self.block_size

    # ---- pools: [num_blocks, *block_shape] of pool_dtype ------------------------------------

    @property
    def block_shape(self) -> tuple[int, ...]:
        """A pool's dims after the block dim."""
        if self.mixed:
            return (self.block_bytes,)
        return (self.num_layers, 2, self.block_size, self.num_kv_heads, self.row_dim)

    @property
    def pool_dtype(self) -> torch.dtype:
        return torch.uint8 if self.mixed else self.dtype

    def pool_layer(self, pool: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """Layer `layer_idx` of a pool [n, *block_shape]: [n, 2, block_size, num_kv_heads,
        row_dim_of(layer)] of `dtype_of(layer)`, strided (a view: writes reach the pool)."""
        if not self.mixed:
            return pool[:, layer_idx]
        start = self.layer_offsets[layer_idx]
        return self._typed(pool[:, start : start + self.layer_bytes(layer_idx)], layer_idx)

    # ---- staging buffers: one layer of n blocks ---------------------------------------------

    def staging_shape(self, num_blocks: int) -> tuple[tuple[int, ...], torch.dtype]:
        """(shape, dtype) of a buffer for one layer of `num_blocks` blocks, any layer."""
        if self.mixed:
            return (num_blocks, self.max_layer_bytes), torch.uint8
        return (num_blocks, *self.layer_shape(0)), self.dtype

    def staged_layer(self, buf: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """A contiguous staging buffer (`staging_shape`) as layer `layer_idx`'s blocks, contiguous
        too (the first n * layer_bytes bytes: the gather kernels want dense blocks); itself when
        uniform."""
        if not self.mixed:
            return buf
        assert buf.is_contiguous(), "a staging buffer is contiguous"
        n = buf.shape[0]
        return self._typed(buf.view(-1)[: n * self.layer_bytes(layer_idx)].view(n, -1), layer_idx)

    def _typed(self, raw: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """Bytes [n, layer_bytes] (last dim contiguous) as the layer's typed blocks."""
        assert raw.dtype == torch.uint8 and raw.stride(-1) == 1
        return raw.view(self.dtype_of(layer_idx)).unflatten(-1, self.layer_shape(layer_idx))


@functools.cache
def _layer_offsets(layout: KVLayout) -> tuple[int, ...]:
    """`KVLayout.layer_offsets`, once per layout (read on every layer's view; a cached_property
    would add an entry to the frozen layout's fields as `vars` sees them)."""
    offsets = [0]
    for layer in range(layout.num_layers):
        dtype = layout.dtype_of(layer)
        region = 2 * layout.block_size * layout.num_kv_heads * stored_row_dim(layout.head_dim, dtype)
        offsets.append(offsets[-1] + region * element_size(dtype))
    return tuple(offsets)


def layer_formats(
    num_layers: int, skip_layers: tuple[int, ...], quantized: torch.dtype, model_dtype: torch.dtype
) -> tuple[torch.dtype, tuple[torch.dtype, ...]]:
    """(`KVLayout.dtype`, `KVLayout.layer_dtypes`) for a skip list: the listed layers keep
    `model_dtype`, the others store `quantized`. A uniform pool when nothing is skipped, the
    formats are equal, or every layer is skipped (then all of them hold `model_dtype`)."""
    skip = set(skip_layers)
    if not skip or quantized == model_dtype:
        return quantized, ()
    if skip >= set(range(num_layers)):
        return model_dtype, ()
    return quantized, tuple(model_dtype if layer in skip else quantized for layer in range(num_layers))


def engine_layout(
    config: EngineConfig, num_layers: int, num_kv_heads: int, head_dim: int, model_dtype: torch.dtype
) -> KVLayout:
    """The engine's layout for `--kv-cache-dtype` and `--kv-cache-dtype-skip-layers` on a model of
    `num_layers` layers and (this rank's) `num_kv_heads` (raises InvalidParameterError for a layer
    the model does not have)."""
    skip = config.kv_cache_dtype_skip_layers
    check_skip_layers(skip, num_layers)
    quantized = kv_storage_dtype(config.kv_cache_dtype, model_dtype)
    dtype, layer_dtypes = layer_formats(num_layers, skip, quantized, model_dtype)
    return KVLayout(num_layers, config.block_size, num_kv_heads, head_dim, dtype, layer_dtypes)


def check_skip_layers(skip_layers: tuple[int, ...], num_layers: int) -> None:
    """InvalidParameterError when the skip list names a layer the model does not have (the engine
    checks it against the plan's model shapes before loading weights, and again at the layout)."""
    outside = [layer for layer in skip_layers if layer >= num_layers]
    if outside:
        raise InvalidParameterError(
            "kv_cache_dtype_skip_layers",
            f"--kv-cache-dtype-skip-layers names layer(s) {outside}, but the model has {num_layers} "
            f"layers (0-{num_layers - 1})",
        )
