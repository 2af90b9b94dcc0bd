"""Cold path (a): attend a step's CPU parts on the host, where the blocks lie (cpu pool or disk file).

`ColdCpuPath` is built once per step by `ColdStep` (attention/cold/dispatch.py) with the step's CPU
parts; per layer, `start` sends q down and runs the parts (on a worker on CUDA, whose result the
GPU waits for on a flag: storage/stream_flag.py), `result` brings (o, lse) up, and `work` fills rows
of the host (o, lse) pair: every part through the C++ kernel
(`kernels/cpu_attention.py`): one call over the cpu pool, read in place, and one per
`cpu_chunk_blocks` disk blocks, read (that layer only) into a reusable host buffer
(`LayerStaging`); or, without the kernel, part by part with a gather of `cpu_chunk_blocks`
blocks and torch's CPU flash kernel. Every call after the first merges by LSE into the rows it
shares. fp32 accumulators; rows of different parts are disjoint, so parts may run on several
workers. A disk read error (`DiskTierIOError`) propagates: the step fails, never the process.

Invariant: the host waits for async copies into the cpu pool (`ensure_host_ready`) before its
first read of the pools in a step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.attention.cold.merge import attend_unmasked_cpu
from kvspill.attention.cold.stream import ColdPart
from kvspill.kernels.cpu_attention import CpuParts, cpu_paged_attention
from kvspill.kernels.kv_quant import dequantize_kv
from kvspill.kernels.merge_states import merge_attention_states_ref
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.storage.stream_flag import StreamFlag
from kvspill.types import TIER_CPU, TIER_DISK


def key_splits(num_blocks: int, num_kv_heads: int) -> int:
    """Key splits for the CPU kernel: enough (kv heads x splits) tasks for the threads, dividing the blocks."""
    want = max(1, -(-torch.get_num_threads() // num_kv_heads))
    return next(s for s in range(min(want, num_blocks), 0, -1) if num_blocks % s == 0)


class LayerStaging:
    """A host buffer for one layer of up to n disk blocks: [n, 2, block_size, num_kv_heads,
    row_dim] as stored (int8 rows carry their scale), grown on demand and kept (one per backend), so a step's disk reads do not fault in
    fresh pages. One buffer per thread: a failed step's CPU work may still run on a worker while
    the retry's starts on another."""

    def __init__(self, layout: KVLayout) -> None:
        self.layout = layout
        self._local = threading.local()

    def get(self, num_blocks: int, layer_idx: int) -> torch.Tensor:
        """Room for `layer_idx` of `num_blocks` blocks, as that layer's view (storage/layout.py)."""
        buf: torch.Tensor | None = getattr(self._local, "buf", None)
        if buf is None or buf.shape[0] < num_blocks:
            shape, dtype = self.layout.staging_shape(num_blocks)
            buf = self._local.buf = torch.empty(shape, dtype=dtype)
        return self.layout.staged_layer(buf[:num_blocks], layer_idx)


def parts_window(parts: CpuParts, start: int, end: int) -> CpuParts:
    """The parts' blocks at positions [start, end) of `parts.block_ids`, renumbered 0..end-start-1
    (the ids of a staging buffer holding those blocks in that order)."""
    lo = np.maximum(parts.block_start[:-1], start)
    hi = np.minimum(parts.block_start[1:], end)
    keep = hi > lo
    counts = (hi - lo)[keep]
    return CpuParts(
        block_ids=np.arange(end - start, dtype=np.int64),
        block_start=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        row_start=parts.row_start[keep],
        row_end=parts.row_end[keep],
    )


@dataclass
class CpuLayer:
    """One layer's CPU work, as `ColdCpuPath.start` began it."""

    layer_idx: int
    out: tuple[torch.Tensor, torch.Tensor]  # host (o, lse) the parts fill; pinned on CUDA
    run_inline: Callable[[], None] | None  # without a worker: run in `result`
    future: Future[None] | None  # on the worker
    done_value: int | None  # the backend's flag takes it once `out` is written; the GPU waits for it


class ColdCpuPath:
    """One step's CPU parts and how to attend them (see the module docstring)."""

    def __init__(
        self,
        storage: TieredKVStorage,
        parts: list[ColdPart],
        *,
        scale: float,
        has_kernel: bool,
        cpu_threads: int,
        chunk_blocks: int,
        ensure_host_ready: Callable[[], None],
        add_stats: Callable[[int, float], None],
        disk_staging: LayerStaging | None = None,
    ) -> None:
        self.storage = storage
        self.disk_staging = disk_staging or LayerStaging(storage.layout)
        self.parts = parts
        self.scale = scale
        self.has_kernel = has_kernel
        self.cpu_threads = cpu_threads
        self.chunk_blocks = chunk_blocks
        self.ensure_host_ready = ensure_host_ready
        self.add_stats = add_stats
        self._tier_parts: list[tuple[int, CpuParts]] | None = None
        self._pending: list[Future[None]] = []  # flagged layers whose errors are not raised yet

    def start(
        self, layer_idx: int, q_cold: torch.Tensor, executor: Executor | None, flag: StreamFlag | None
    ) -> CpuLayer:
        """Begin one layer: q goes down (on CUDA one small copy into pinned memory, ordered after
        q's kernels) and the parts run on the worker, or inline in `result` without one. With a
        worker and a flag on CUDA the worker sets the flag when it is done (`result` says why)."""
        event = None
        if q_cold.is_cuda:
            q_host = torch.empty(q_cold.shape, dtype=q_cold.dtype, pin_memory=self.storage.cpu_pinned)
            q_host.copy_(q_cold, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            q_host = q_cold
        # Pinned on CUDA: the result goes up with a non-blocking copy. From pageable memory the
        # copy waited for the device to finish the layer's stream share, and the host then
        # launched the rest of the layer onto an idle GPU: each layer paid its launches once more.
        pin = q_cold.is_cuda
        o = torch.zeros(q_cold.shape, dtype=torch.float32, pin_memory=pin)
        lse = torch.full(q_cold.shape[:2], float("-inf"), dtype=torch.float32, pin_memory=pin)
        parts = self.work_items()
        value = flag.next_value() if flag is not None and executor is not None and q_cold.is_cuda else None

        def run() -> None:
            try:
                for p in parts:
                    self.work(layer_idx, q_host, p, event, o, lse)
            finally:  # also on failure: the stream must not wait forever (raised from the future)
                if flag is not None and value is not None:
                    flag.set(value)

        if executor is None:
            return CpuLayer(layer_idx, (o, lse), run, None, None)
        future = executor.submit(run)
        if value is not None:
            self._pending.append(future)
        return CpuLayer(layer_idx, (o, lse), None, future, value)

    def result(
        self, layer: CpuLayer, flag: StreamFlag | None, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's (o, lse), on `device`. With a flag the compute stream waits for the worker
        (storage/stream_flag.py) and the host goes on, except at the last layer, where it waits for
        every flagged layer of the step: their errors raise here, and no worker still writes
        into this step's buffers when the next step starts."""
        if layer.done_value is not None:
            assert flag is not None
            flag.wait(layer.done_value)
            last = layer.layer_idx == self.storage.layout.num_layers - 1
            pending = []
            for future in self._pending:
                if last or future.done():
                    future.result()  # raises a failed layer's error
                else:
                    pending.append(future)
            self._pending = pending
        elif layer.run_inline is not None:
            layer.run_inline()
        elif layer.future is not None:
            layer.future.result()
        o, lse = (t.to(device, non_blocking=True) for t in layer.out)
        return o, lse

    def work_items(self) -> list[ColdPart | None]:
        """One kernel call covers every part (it spreads them over its threads); the fallback
        runs part by part."""
        return [None] if self.has_kernel else list(self.parts)

    def work(
        self,
        layer_idx: int,
        q_host: torch.Tensor,
        part: ColdPart | None,
        event: torch.cuda.Event | None,
        o: torch.Tensor,
        lse: torch.Tensor,
    ) -> None:
        """Attend on the CPU and write the rows of (o, lse): all parts with the kernel (part None),
        else `part` alone (rows of parts are disjoint)."""
        with torch.inference_mode():
            if event is not None:
                event.synchronize()
            self.ensure_host_ready()
            # timed from here: the rate of the attention itself, not of the wait for q
            t0 = time.perf_counter()
            if part is None:
                num_blocks = self._kernel_layer(layer_idx, q_host, o, lse)
            else:
                num_blocks = self._part_torch(layer_idx, q_host, part, o, lse)
        self.add_stats(num_blocks * self.storage.layout.layer_bytes(layer_idx), time.perf_counter() - t0)

    def _kernel_layer(self, layer_idx: int, q_host: torch.Tensor, o: torch.Tensor, lse: torch.Tensor) -> int:
        """Every CPU part through the C++ kernel: the cpu pool in place, the disk blocks per chunk
        of `chunk_blocks` through the staging buffer (see the module docstring)."""
        num_calls = 0
        for tier, parts in self.tier_parts():
            if tier == TIER_CPU:
                pool_layer = self.storage.tier_layer(TIER_CPU, layer_idx)  # read in place
                self._kernel_call(q_host, pool_layer, layer_idx, parts, (o, lse), num_calls == 0)
                num_calls += 1
                continue
            for start in range(0, len(parts.block_ids), self.chunk_blocks):
                ids = parts.block_ids[start : start + self.chunk_blocks]
                # [n, 2, block_size, num_kv_heads, row_dim] of the layer's format
                staged = self.disk_staging.get(len(ids), layer_idx)
                self.storage.gather_layer(TIER_DISK, layer_idx, ids, staged)
                window = parts_window(parts, start, start + len(ids))
                self._kernel_call(q_host, staged, layer_idx, window, (o, lse), num_calls == 0)
                num_calls += 1
        return sum(len(parts.block_ids) for _, parts in self.tier_parts())

    def _kernel_call(
        self,
        q_host: torch.Tensor,
        pool: torch.Tensor,
        layer_idx: int,
        parts: CpuParts,
        out: tuple[torch.Tensor, torch.Tensor],
        first: bool,
    ) -> None:
        """One kernel call over `pool`, one layer's view, into `out` (the first call) or into a
        partial merged into it by LSE."""
        if first:
            cpu_paged_attention(q_host, pool, layer_idx, parts, self.scale, out, self.cpu_threads)
            return
        o, lse = out
        o_t, lse_t = torch.zeros_like(o), torch.full_like(lse, float("-inf"))
        cpu_paged_attention(q_host, pool, layer_idx, parts, self.scale, (o_t, lse_t), self.cpu_threads)
        merged_o, merged_lse = merge_attention_states_ref(o, lse, o_t, lse_t)
        o.copy_(merged_o)
        lse.copy_(merged_lse)

    def tier_parts(self) -> list[tuple[int, CpuParts]]:
        """(tier, the CPU parts' blocks in it), for the tiers that hold any; built once a step."""
        if self._tier_parts is None:
            self._tier_parts = []
            for tier in (TIER_CPU, TIER_DISK):
                picked = [(p, p.cpu_block_ids if tier == TIER_CPU else p.disk_block_ids) for p in self.parts]
                picked = [(p, ids) for p, ids in picked if len(ids)]
                if not picked:
                    continue
                counts = np.array([0] + [len(ids) for _, ids in picked], dtype=np.int64)
                self._tier_parts.append(
                    (
                        tier,
                        CpuParts(
                            block_ids=np.concatenate([ids for _, ids in picked]).astype(np.int64),
                            block_start=np.cumsum(counts),
                            row_start=np.array([p.row_start for p, _ in picked], dtype=np.int64),
                            row_end=np.array([p.row_end for p, _ in picked], dtype=np.int64),
                        ),
                    )
                )
        return self._tier_parts

    def _part_torch(
        self, layer_idx: int, q_host: torch.Tensor, part: ColdPart, o: torch.Tensor, lse: torch.Tensor
    ) -> int:
        """Without the kernel: gather chunks of `chunk_blocks` blocks, torch's CPU flash kernel."""
        layout = self.storage.layout
        q = q_host[part.row_start : part.row_end]
        o_acc, lse_acc = o[part.row_start : part.row_end], lse[part.row_start : part.row_end]
        blocks = [(TIER_CPU, b) for b in part.cpu_block_ids] + [(TIER_DISK, b) for b in part.disk_block_ids]
        for c0 in range(0, len(blocks), self.chunk_blocks):
            chunk = blocks[c0 : c0 + self.chunk_blocks]
            kv = self._gather_host(layer_idx, chunk)  # [n, 2, block_size, num_kv_heads, head_dim]
            k, v = (kv[:, i].reshape(-1, layout.num_kv_heads, layout.head_dim) for i in (0, 1))
            o_p, lse_p = attend_unmasked_cpu(q, k, v, self.scale, key_splits(len(chunk), layout.num_kv_heads))
            merged_o, merged_lse = merge_attention_states_ref(o_acc, lse_acc, o_p, lse_p)
            o_acc.copy_(merged_o)
            lse_acc.copy_(merged_lse)
        return len(blocks)

    def _gather_host(self, layer_idx: int, blocks: list[tuple[int, int]]) -> torch.Tensor:
        """K and V of `blocks` of one layer: [n, 2, block_size, num_kv_heads, head_dim], a fresh
        tensor (parts may run on several workers at once), in the pool's dtype (int8 pools:
        dequantized to fp32)."""
        layout = self.storage.layout
        out = torch.empty((len(blocks), *layout.layer_shape(layer_idx)), dtype=layout.dtype_of(layer_idx))
        offset = 0
        for tier in (TIER_CPU, TIER_DISK):
            ids = np.array([b for t, b in blocks if t == tier], dtype=np.int64)
            if len(ids):  # blocks come cpu first, then disk
                self.storage.gather_layer(tier, layer_idx, ids, out[offset : offset + len(ids)])
                offset += len(ids)
        if out.dtype == torch.int8:  # blocks carry their scales (kernels/kv_quant.py)
            return dequantize_kv(out)
        return out
