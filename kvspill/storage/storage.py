"""KV cache storage: the tensors that hold K and V for every block (runner side, torch).

Layout (storage/layout.py): one tensor `kv_cache: [num_blocks, num_layers, 2, block_size, num_kv_heads,
row_dim]` (dim 2: 0 = K, 1 = V; row_dim = head_dim, or head_dim + 4 for int8 KV, whose block regions
hold a value plane and a plane of fp32 row scales, kernels/kv_quant.py, so scales travel inside
every block copy), or raw bytes `[num_blocks, block_bytes]` when layers keep different formats
(`--kv-cache-dtype-skip-layers`). All layers of one block are contiguous, so a block moves between
tiers as one copy of `block_bytes` (2 MiB for Llama-3.1-8B in bf16 with 16-token blocks: the size
PCIe copies like). Attention kernels take the strided per-layer view `layer(l)`.

`TieredKVStorage` adds the cold tiers: a cpu pool in host memory with the same per-block layout
(pinned on CUDA, allocated once) and a disk pool in a file read and written with explicit I/O
(`storage/disk_pool.py`: an I/O error is an exception, never a signal); `storage/transfer.py` moves blocks
between them and `attention/cold/dispatch.py` attends to the cold ones.

Invariant: the scheduler's block ids index dim 0 of their tier's tensor directly (the disk
pool's `read_*`/`write_blocks` for the disk tier); this module never decides which block holds what.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from kvspill.errors import OutOfKVMemoryError
from kvspill.kernels.kv_quant import hadamard
from kvspill.kernels.uva_gather import index_copy_rows
from kvspill.storage.disk_pool import DiskPool
from kvspill.storage.host_memory import FAST_PIN_MIN_BYTES, nbytes_of, pinned_zeros
from kvspill.storage.layout import KVLayout
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

logger = logging.getLogger(__name__)


class KVStorage:
    """The device-resident KV pool: `num_blocks` blocks of `layout`."""

    def __init__(self, layout: KVLayout, num_blocks: int, device: torch.device) -> None:
        self.layout = layout
        self.num_blocks = num_blocks
        self.device = device
        # kv_cache: [num_blocks, num_layers, 2, block_size, num_kv_heads, row_dim], or
        # [num_blocks, block_bytes] uint8 for a mixed pool (storage/layout.py)
        shape = (num_blocks, *layout.block_shape)
        if device.type == "cpu":
            self.kv_cache = zeroed_host_tensor(shape, layout.pool_dtype)
        else:
            self.kv_cache = torch.zeros(shape, dtype=layout.pool_dtype, device=device)
        # int8 layers hold K and V in the Hadamard basis (kernels/kv_quant.py): [head_dim, head_dim]
        has_int8 = any(layout.dtype_of(layer) == torch.int8 for layer in range(layout.num_layers))
        self._hadamard = hadamard(layout.head_dim).to(device) if has_int8 else None

    def layer(self, layer_idx: int) -> torch.Tensor:
        """[num_blocks, 2, block_size, num_kv_heads, row_dim], strided (not contiguous in dim 0)."""
        return self.layout.pool_layer(self.kv_cache, layer_idx)

    def rotation(self, layer_idx: int) -> torch.Tensor | None:
        """The basis an int8 layer's K and V are stored in ([head_dim, head_dim]); None for others."""
        return self._hadamard if self.layout.dtype_of(layer_idx) == torch.int8 else None

    @property
    def nbytes(self) -> int:
        return self.kv_cache.numel() * self.kv_cache.element_size()


# ---- tiers --------------------------------------------------------------------------------


def allocate_host_pool(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> tuple[torch.Tensor, bool]:
    """A zeroed host tensor, pinned when `pin` and the allocator allows; returns (tensor, pinned).

    Pinning can be refused (no CUDA, a locked-memory limit, a container): the pool then lives in
    pageable memory, which works but copies at a fraction of the pinned rate (the physics in
    DESIGN.md: 10-13 against 55 GB/s), so the fallback says so once.
    """
    if pin and nbytes_of(shape, dtype) >= FAST_PIN_MIN_BYTES:
        try:
            tensor, owner = pinned_zeros(shape, dtype)
            # The pool tensor owns its registration: dropping the pool unregisters it.
            tensor._kvspill_host_buffer = owner  # type: ignore[attr-defined]
            return tensor, True
        except (RuntimeError, OSError) as e:  # e.g. a locked-memory limit; torch's allocator next
            logger.info("fast pinning of the host pool failed (%s); using torch's pinned allocator", e)
    if pin:
        try:
            return torch.zeros(shape, dtype=dtype, pin_memory=True), True
        except RuntimeError as e:
            logger.warning(
                "could not pin the cpu KV tier (%s); using pageable memory: copies will be slower", e
            )
    try:
        return zeroed_host_tensor(shape, dtype), False
    except MemoryError as e:  # the last fallback: one line for the user, not numpy's traceback
        raise OutOfKVMemoryError(
            f"the cpu KV tier ({nbytes_of(shape, dtype) / 2**30:.1f} GiB) could not be allocated in "
            "the RAM left after loading: lower --cpu-kv-budget"
        ) from e


def zeroed_host_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed tensor in pageable host memory, zeroed lazily: numpy's zeros is calloc, which
    takes fresh pages (zero by the kernel) for a large pool instead of writing every byte, so a
    GiB-sized pool costs nothing until used (torch.zeros wrote 2.8 GiB in 3-7 s on a 2-core host).
    The unused tail of a block must read as zeros, not garbage: masked positions still enter
    the weighted sum of V as 0 * value, and 0 * NaN is NaN."""
    nbytes = nbytes_of(shape, dtype)
    if nbytes == 0:
        return torch.zeros(shape, dtype=dtype)
    return torch.from_numpy(np.zeros(nbytes, dtype=np.uint8)).view(dtype).view(shape)


class TieredKVStorage(KVStorage):
    """The KV pools of all tiers, one per-block layout: gpu (`kv_cache` on `device`), cpu, disk.

    - gpu: `KVStorage`'s tensor, so every existing caller (attention, CUDA graphs) sees the
      same object; `layer(l)` is still the gpu view.
    - cpu: `num_cpu_blocks` blocks in host memory, allocated once; pinned when the device is
      CUDA (pageable with a warning when pinning is refused, always pageable without CUDA).
    - disk: `num_disk_blocks` blocks in a file under `disk_dir` (a temp dir when None), read
      and written through `DiskPool` (storage/disk_pool.py).
    Block ids of each tier index dim 0 of that tier's tensor (the disk pool's blocks for disk).
    `copy_stream` is the side stream every tier copy runs on (None off CUDA: copies there are
    synchronous).

    Invariant: this class holds bytes; it never decides which block lives where.
    """

    def __init__(
        self,
        layout: KVLayout,
        num_blocks: int,
        device: torch.device,
        *,
        num_cpu_blocks: int = 0,
        num_disk_blocks: int = 0,
        disk_dir: str | os.PathLike[str] | None = None,
        pin_memory: bool | None = None,
    ) -> None:
        super().__init__(layout, num_blocks, device)
        is_cuda = device.type == "cuda"
        pin = is_cuda if pin_memory is None else pin_memory
        # cpu_cache: [num_cpu_blocks, *layout.block_shape]
        self.cpu_cache, self.cpu_pinned = allocate_host_pool(
            (num_cpu_blocks, *layout.block_shape), layout.pool_dtype, pin
        )
        self.disk = DiskPool(layout, num_disk_blocks, disk_dir) if num_disk_blocks else None
        self.copy_stream = torch.cuda.Stream(device=device) if is_cuda else None

    @property
    def num_cpu_blocks(self) -> int:
        return int(self.cpu_cache.shape[0])

    @property
    def num_disk_blocks(self) -> int:
        return self.disk.num_blocks if self.disk is not None else 0

    def pool(self, tier: int) -> torch.Tensor:
        """The whole pool of a tensor tier (gpu, cpu): [num_tier_blocks, num_layers, 2, block_size,
        num_kv_heads, row_dim]. The disk tier is a file: `read_blocks`/`gather_layer`/`write_blocks`."""
        if tier == TIER_GPU:
            return self.kv_cache
        if tier == TIER_CPU:
            return self.cpu_cache
        if tier == TIER_DISK:
            raise ValueError("the disk tier is a file, not a tensor: read_blocks, gather_layer, write_blocks")
        raise ValueError(f"unknown KV tier {tier}")

    def tier_layer(self, tier: int, layer_idx: int) -> torch.Tensor:
        """[num_tier_blocks, 2, block_size, num_kv_heads, row_dim], strided, of a tensor tier."""
        return self.layout.pool_layer(self.pool(tier), layer_idx)

    def num_tier_blocks(self, tier: int) -> int:
        return self.num_disk_blocks if tier == TIER_DISK else int(self.pool(tier).shape[0])

    def read_blocks(self, tier: int, block_ids: np.ndarray | list[int]) -> torch.Tensor:
        """A copy of whole blocks of any tier: [n, num_layers, 2, block_size, num_kv_heads, head_dim]
        (on the host for the disk tier). Raises DiskTierIOError when the disk cannot give them."""
        ids = np.asarray(block_ids, dtype=np.int64)
        if tier != TIER_DISK:
            return self.pool(tier).index_select(0, torch.from_numpy(ids).to(self.pool(tier).device))
        assert self.disk is not None, "no disk tier"
        out = torch.empty((len(ids), *self.layout.block_shape), dtype=self.layout.pool_dtype)
        self.disk.read_blocks(ids, out)
        return out

    def write_blocks(self, tier: int, block_ids: np.ndarray | list[int], src: torch.Tensor) -> None:
        """Whole blocks of any tier = src ([n, num_layers, 2, ...]). Raises DiskTierIOError when the
        disk cannot take them."""
        ids = np.asarray(block_ids, dtype=np.int64)
        if tier != TIER_DISK:
            pool = self.pool(tier)
            index_copy_rows(pool, torch.from_numpy(ids).to(pool.device), src.to(pool.device))
            return
        assert self.disk is not None, "no disk tier"
        self.disk.write_blocks(ids, src.to("cpu").contiguous())

    def gather_layer(
        self, tier: int, layer_idx: int, block_ids: np.ndarray | torch.Tensor, out: torch.Tensor
    ) -> None:
        """out[i] = layer `layer_idx` of block block_ids[i] (host ids) of a cold tier; out: [n, 2,
        block_size, num_kv_heads, head_dim], contiguous on the host for the disk tier."""
        if tier == TIER_DISK:
            assert self.disk is not None, "no disk tier"
            self.disk.read_layer(np.asarray(block_ids, dtype=np.int64), layer_idx, out)
            return
        ids = block_ids if isinstance(block_ids, torch.Tensor) else torch.from_numpy(np.asarray(block_ids))
        torch.index_select(self.tier_layer(tier, layer_idx), 0, ids, out=out)

    @property
    def host_nbytes(self) -> int:
        return self.cpu_cache.numel() * self.cpu_cache.element_size()

    @property
    def disk_nbytes(self) -> int:
        return self.disk.nbytes if self.disk is not None else 0
