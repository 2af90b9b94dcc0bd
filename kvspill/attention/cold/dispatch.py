"""Exact attention over cold KV blocks (cpu and disk tiers), merged by LSE with the gpu part.

The gpu-tier kernels see each sequence's gpu blocks only (a compacted block table, see
runner/inputs.py). For the sequences of a step that have cold blocks, this module computes the
other partial result (o, lse) of their query rows over those blocks; the attention backend
merges the two (`kernels/merge_states.py`). Cold blocks are full and before every query of the
step (TransferPlan invariant): every query sees every cold key, no mask (see `cold_math`).

Paths (`ColdPath`, chosen once at start-up in the engine's record of runtime choices,
`plan/choices.py`; `ColdAttentionConfig` carries it and its thresholds):
- "cpu" (a): q of the cold rows goes down to the host (pinned, one small copy), the CPU attends
  the blocks where they lie (cpu pool in place, disk file read per chunk) in fp32, chunk by chunk of
  `cpu_chunk_blocks`, and (o, lse) comes back up. The CPU work runs after the GPU kernels of
  the layer are enqueued, so the two overlap; `cpu_workers > 0` runs it on a thread pool, and
  then on CUDA the compute stream itself waits for the result (`stream_flag`), not the host.
- "stream" (b): the blocks are copied to the device in double-buffered chunks, the next chunk
  or the next layer's first chunk prefetched while the current one is attended (`cold_stream`).
- "split": each sequence's cold blocks are split between (a) and (b) in the ratio
  `cpu_fraction` (default: measured CPU attention vs H2D bandwidth, else 1/2); disk blocks go
  to the CPU first (it reads the disk file straight into host memory), pinned cpu blocks to the stream.
- "sparse": decode rows (one query row of a sequence) attend only the cold blocks their
  queries select within `sparse_budget_tokens` (`cold_sparse`, block summaries kept by
  `BlockSummaries`); prefill rows take the exact path "auto" picks. Not exact by design.
"auto" is "cpu" off CUDA; on CUDA the record makes it "split" where a calibration says the CPU
pays (`plan.cold_rates.auto_uses_split`, with `SplitThresholds`: small steps stream), else
"stream". Each path's CUDA-graph variant (runner/stream_graphs.py, runner/sparse_graphs.py) is in
the same record (`RuntimeChoices.cold_graphs`). Off CUDA every path runs the same code with the "gpu" tier on the CPU device, so tests
exercise all of them. The CPU path's work is in `cold_cpu`.

Invariants: a step without cold blocks never builds a `ColdStep` (no cost, CUDA graphs stay);
the cold rows of a step are fixed for all layers; nothing here decides where a block lives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq
from kvspill.attention.cold.cpu import ColdCpuPath, CpuLayer, LayerStaging
from kvspill.attention.cold.exact_paths import exact_path
from kvspill.attention.cold.merge import merge_partials
from kvspill.attention.cold.sparse import SparseColdStep, SparseCounts, SparseFetched, SparseInput
from kvspill.attention.cold.step_sync import HostReady
from kvspill.attention.cold.stream import ColdPart, StreamChunk, StreamStager, plan_chunks
from kvspill.attention.cold.stream_graph import GraphStreamPart
from kvspill.attention.sparse.anchor import PromptAnchors
from kvspill.attention.sparse.cache import SparseBlockCache
from kvspill.env import sparse_hot_after, sparse_overlap_on
from kvspill.kernels.cpu_attention import load_kernel
from kvspill.plan.choices import ColdPath
from kvspill.stats import ColdAttentionCounters
from kvspill.storage.storage import TieredKVStorage
from kvspill.storage.stream_flag import StreamFlag
from kvspill.storage.summary import BlockSummaries
from kvspill.types import TIER_CPU, TIER_DISK


@dataclass
class ColdStats:
    """The running totals behind `ColdAttentionCounters` (kvspill/stats.py); bytes are KV bytes
    attended (per layer, summed over layers)."""

    num_steps: int = 0
    cpu_bytes: int = 0
    cpu_seconds: float = 0.0  # wall time of the CPU partials (summed over workers)
    stream_bytes: int = 0  # bytes staged and copied to the device
    stream_seconds: float = 0.0  # host wall time of the stream path (gathers, launches; all of it off CUDA)
    stream_copy_seconds: float = 0.0  # CUDA: measured H2D time of the staged chunks
    stream_graph_bytes: int = 0  # bytes streamed by CUDA-graphed steps (`runner/stream_graphs.py`)
    sparse: SparseCounts = field(default_factory=SparseCounts)
    sparse_seconds: float = 0.0  # host wall time of the sparse path (scoring, gathers, launches)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_cpu(self, nbytes: int, seconds: float) -> None:
        with self.lock:
            self.cpu_bytes += nbytes
            self.cpu_seconds += seconds


class ColdAttentionBackend:
    """Long-lived: the path choice, staging buffers, worker pool and stats of cold attention."""

    def __init__(
        self,
        storage: TieredKVStorage,
        config: ColdAttentionConfig | None = None,
        wait_host: Callable[[], None] | None = None,
    ) -> None:
        """`wait_host()` (e.g. `KVTransferEngine.wait_host`) blocks until async copies into the
        cpu pool have landed; it runs before the host first reads the pools in a step."""
        self.storage = storage
        self.config = config or ColdAttentionConfig()
        # chosen once (the engine's record, plan/choices.py): the decode rows' path, and the exact
        # path of the rows it does not cover (sparse's prefill rows; else the same)
        self.cold_path, self.path = self.config.cold_paths(storage.device)
        self.exact = exact_path(self.path, self.config, storage.device.type == "cuda")  # its CPU share
        self.cpu_fraction = self.exact.cpu_fraction
        self.wait_host = wait_host or (lambda: None)
        self.stats = ColdStats()
        self._stager: StreamStager | None = None
        self.executor = ThreadPoolExecutor(self.config.cpu_workers) if self.config.cpu_workers else None
        # With a worker on CUDA the GPU itself waits for each layer's CPU result (`stream_flag`):
        # the main thread does not block per layer.
        self.cpu_done = StreamFlag.create(storage.device) if self.executor is not None else None
        self.cpu_threads = self.config.cpu_threads or torch.get_num_threads()
        # The C++ kernel reads blocks in place; None (logged once): gather + torch's kernel.
        self.cpu_kernel = load_kernel() if self.exact.uses_cpu_kernel else None
        self.disk_staging = LayerStaging(storage.layout)  # the CPU path's disk reads, one layer at a time
        self.sparse_budget_blocks = max(1, self.config.sparse_budget_tokens // storage.layout.block_size)
        self._init_sparse()

    def _init_sparse(self) -> None:
        """The sparse path's parts (all None unless sparse): decode rows attend the cold blocks
        their queries select (`cold_sparse`) by these summaries of every cold block, which the
        transfer engine keeps (`on_copy`)."""
        storage, config = self.storage, self.config
        self.summaries = BlockSummaries(storage) if self.cold_path is ColdPath.SPARSE else None
        # on CUDA: the stream that selects and fetches each layer's blocks (`ColdStep.begin`)
        self.sparse_stream = (
            torch.cuda.Stream(storage.device)
            if self.summaries is not None and storage.device.type == "cuda" and sparse_overlap_on()
            else None
        )
        self.sparse_hot_after = sparse_hot_after() if self.sparse_stream is not None else "none"
        # the queries of each prompt's end choose part of the budget (`sparse_anchor`)
        self.anchors = (
            PromptAnchors.of(config, storage, self.sparse_budget_blocks) if self.summaries else None
        )
        # the chosen blocks of up to `sparse_cache_seqs` decode requests stay on the device
        self.sparse_cache = None
        if self.summaries is not None and config.sparse_cache_seqs and config.max_seq_blocks:
            self.sparse_cache = SparseBlockCache(
                storage.layout,
                storage.device,
                self.sparse_budget_blocks,
                config.sparse_cache_seqs,
                config.max_seq_blocks,
            )

    def stager(self) -> StreamStager:
        if self._stager is None:
            self._stager = StreamStager(self.storage, self.config.stream_chunk_blocks)
        return self._stager

    def decode_cpu_fraction(self, seqs: list[ColdSeq], graphable: bool = False) -> float:
        """The CPU's share of decode rows' cold blocks in a step of `seqs`, by the exact path's rule
        (`exact_paths.py`): "cpu" and "stream" all or none; split's share for the step's cold bytes,
        or none where they are too few to hand over (more where the step could otherwise replay
        a stream graph, `graphable`)."""
        layout = self.storage.layout
        blocks = sum(len(s.block_ids) for s in seqs if s.num_tokens == 1)
        return self.exact.decode_share(blocks * (layout.block_bytes // layout.num_layers), graphable)

    def for_step(self, seqs: list[ColdSeq], scale: float) -> ColdStep | None:
        """The step's cold work, or None when no sequence has cold blocks."""
        if not seqs:
            return None
        self.stats.num_steps += 1
        return ColdStep(self, seqs, scale)

    def counters(self) -> ColdAttentionCounters:
        """Totals since start (resolves the stream copy timings that have completed; never syncs)."""
        s = self.stats
        if self._stager is not None:
            s.stream_bytes = self._stager.bytes_loaded + s.stream_graph_bytes
            s.stream_copy_seconds = self._stager.copy_timer.resolve()
        return ColdAttentionCounters(
            num_steps=s.num_steps,
            cpu_fraction=self.cpu_fraction,
            cpu_bytes=s.cpu_bytes,
            cpu_seconds=s.cpu_seconds,
            stream_bytes=s.stream_bytes,
            stream_seconds=s.stream_seconds,
            stream_copy_seconds=s.stream_copy_seconds,
            stream_graph_bytes=s.stream_graph_bytes,
            sparse_selected_blocks=s.sparse.selected_blocks,
            sparse_cold_blocks=s.sparse.cold_blocks,
            sparse_bytes=s.sparse.bytes + self._sparse_cache_copied_bytes(),
            sparse_seconds=s.sparse_seconds,
            summary_bytes=self.summaries.nbytes if self.summaries is not None else 0,
        )

    def _sparse_cache_copied_bytes(self) -> int:
        """Bytes the sparse cache copied in. Reading the device's count synchronizes once per call
        (the monitor reads about once a second), never per step."""
        cache = self.sparse_cache
        if cache is None:
            return 0
        layout = self.storage.layout
        return int(cache.copied_blocks) * layout.block_size * layout.bytes_per_token // layout.num_layers

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)


def split_seq(seq: ColdSeq, row_start: int, cpu_fraction: float) -> tuple[ColdPart | None, ColdPart | None]:
    """(cpu part, stream part) of one sequence: disk blocks first to the CPU, cpu blocks last."""
    is_disk = seq.block_tiers == TIER_DISK
    ordered_tiers = np.concatenate([seq.block_tiers[is_disk], seq.block_tiers[~is_disk]])
    ordered_ids = np.concatenate([seq.block_ids[is_disk], seq.block_ids[~is_disk]]).astype(np.int64)
    n_cpu = int(round(len(ordered_ids) * cpu_fraction))
    row_end = row_start + seq.num_tokens

    def part(tiers: np.ndarray, ids: np.ndarray) -> ColdPart | None:
        if len(ids) == 0:
            return None
        return ColdPart(row_start, row_end, ids[tiers == TIER_CPU], ids[tiers == TIER_DISK])

    return part(ordered_tiers[:n_cpu], ordered_ids[:n_cpu]), part(ordered_tiers[n_cpu:], ordered_ids[n_cpu:])


@dataclass
class LayerWork:
    """What `ColdStep.begin` started for one layer."""

    layer_idx: int
    q_cold: torch.Tensor  # [num_cold_rows, num_heads, head_dim] on the KV device
    cpu: CpuLayer | None = None  # the CPU parts' work, when the step has any
    sparse: SparseFetched | None = None  # the sparse rows' blocks, fetched on the backend's sparse stream


class ColdStep:
    """One step's cold attention: fixed cold rows, the CPU and stream parts, per-layer calls.

    `rows`: [num_cold_rows] int64 on the KV device, the step rows of every cold sequence in
    step order (the "cold-row space" of all partials). Per layer: `begin` before the GPU
    kernels (q goes down, CPU work and the sparse fetch may start), `finish` after them (stream
    path, sparse attention, CPU result up).
    """

    def __init__(self, backend: ColdAttentionBackend, seqs: list[ColdSeq], scale: float) -> None:
        self.backend = backend
        self.storage = backend.storage
        self.scale = scale
        self.cpu_parts: list[ColdPart] = []
        self.stream_parts: list[ColdPart] = []
        rows, sparse_seqs = self._divide(seqs)
        self.rows = torch.tensor(rows, dtype=torch.int64).to(self.storage.device)
        self._chunks: list[StreamChunk] | None = None
        self._loaded: dict[int, int] = {}  # staging buffer -> item loaded into it this step
        # Its own object, not a bound method of this step: the paths below keep it, and a bound
        # method would make a cycle (step -> path -> step) that only Python's cyclic GC frees.
        # Steps then lived on for many steps with their chunk tables: GPU memory grew with the
        # context until a 512K prefill ran out (H200, 2026-11-27).
        self._ensure_host_ready = HostReady(backend.wait_host)
        self.cpu = ColdCpuPath(
            self.storage,
            self.cpu_parts,
            scale=scale,
            has_kernel=backend.cpu_kernel is not None,
            cpu_threads=backend.cpu_threads,
            chunk_blocks=backend.config.cpu_chunk_blocks,
            ensure_host_ready=self._ensure_host_ready,
            add_stats=backend.stats.add_cpu,
            disk_staging=backend.disk_staging,
        )
        self.sparse = None
        self.graph_stream: GraphStreamPart | None = None  # set by `for_graph` only
        if sparse_seqs:
            assert backend.summaries is not None
            self.sparse = SparseColdStep(
                self.storage,
                backend.summaries,
                sparse_seqs,
                backend.sparse_budget_blocks,
                backend.stats.sparse,
                self._ensure_host_ready,
                backend.sparse_cache,
                backend.anchors,
            )

    def _divide(self, seqs: list[ColdSeq]) -> tuple[list[int], list[SparseInput]]:
        """The step rows of `seqs` in cold-row order, and their work: sparse decode rows
        (returned), the rest divided between the CPU and the stream parts (`cpu_parts`,
        `stream_parts`) by the backend's share for this step."""
        backend = self.backend
        rows: list[int] = []
        sparse_seqs: list[SparseInput] = []
        decode_fraction = backend.decode_cpu_fraction(seqs)
        for seq in seqs:
            if backend.summaries is not None and seq.num_tokens == 1:  # a decode row: sparse
                sparse_seqs.append(
                    SparseInput(len(rows), seq.block_tiers, seq.block_ids, seq.block_index, seq.req_id)
                )
                rows.append(seq.token_start)
                continue
            fraction = (
                decode_fraction if seq.num_tokens == 1 else backend.exact.prefill_share(decode_fraction)
            )
            cpu_part, stream_part = split_seq(seq, len(rows), fraction)
            rows.extend(range(seq.token_start, seq.token_start + seq.num_tokens))
            if cpu_part is not None:
                self.cpu_parts.append(cpu_part)
            if stream_part is not None:
                self.stream_parts.append(stream_part)
        return rows, sparse_seqs

    @classmethod
    def for_graph(
        cls,
        backend: ColdAttentionBackend,
        part: SparseColdStep | GraphStreamPart,
        rows: torch.Tensor,
        scale: float,
    ) -> ColdStep:
        """The cold part of a CUDA-graphed step (`runner/sparse_graphs.py`, `runner/stream_graphs.py`):
        one decode sequence, whose step row (`rows`, int64 [1]) and sparse step or graph stream
        part are the graph's static buffers. No CPU parts, no eager stream parts."""
        step = cls(backend, [], scale)
        step.rows = rows
        if isinstance(part, GraphStreamPart):
            step.graph_stream = part
        else:
            step.sparse = part
        return step

    # ---- per layer -------------------------------------------------------------------------

    def begin(self, layer_idx: int, q: torch.Tensor) -> LayerWork:
        q_cold = q.index_select(0, self.rows)  # [num_cold_rows, num_heads, head_dim]
        work = LayerWork(layer_idx, q_cold)
        side = self.backend.sparse_stream
        if self.sparse is not None and side is not None:
            # Selection and the PCIe gather of the chosen blocks run beside the attention over the
            # gpu tier (and, in a CUDA graph, as a parallel branch of it); `finish` joins them.
            side.wait_stream(torch.cuda.current_stream(q.device))
            with torch.cuda.stream(side):
                work.sparse = self.sparse.fetch(layer_idx, q_cold, self.backend.sparse_hot_after)
            if work.sparse.hot_start is not None:
                torch.cuda.current_stream(q.device).wait_event(work.sparse.hot_start)
        if self.cpu_parts:
            work.cpu = self.cpu.start(layer_idx, q_cold, self.backend.executor, self.backend.cpu_done)
        return work

    def finish(self, work: LayerWork) -> tuple[torch.Tensor, torch.Tensor]:
        """(o [num_cold_rows, num_heads, head_dim] float32, lse [num_cold_rows, num_heads]) over all cold keys."""
        q_cold = work.q_cold
        acc_o = torch.zeros(q_cold.shape, dtype=torch.float32, device=q_cold.device)
        acc_lse = torch.full(q_cold.shape[:2], float("-inf"), dtype=torch.float32, device=q_cold.device)
        if self.stream_parts:
            t0 = time.perf_counter()
            self._stream_layer(work.layer_idx, q_cold, acc_o, acc_lse)
            self.backend.stats.stream_seconds += time.perf_counter() - t0
        if self.sparse is not None:
            t0 = time.perf_counter()
            if work.sparse is not None:
                assert self.backend.sparse_stream is not None
                torch.cuda.current_stream(q_cold.device).wait_stream(self.backend.sparse_stream)
                self.sparse.attend_fetched(work.layer_idx, work.sparse, self.scale, acc_o, acc_lse)
            else:
                self.sparse.attend(work.layer_idx, q_cold, self.scale, acc_o, acc_lse)
            self.backend.stats.sparse_seconds += time.perf_counter() - t0
        if self.graph_stream is not None:
            self.graph_stream.attend(work.layer_idx, q_cold, self.scale, acc_o, acc_lse)
        if work.cpu is None:
            return acc_o, acc_lse
        o_cpu, lse_cpu = self.cpu.result(work.cpu, self.backend.cpu_done, q_cold.device)
        if not self.stream_parts and self.sparse is None:
            return o_cpu, lse_cpu
        return merge_partials(acc_o, acc_lse, o_cpu, lse_cpu)

    # ---- path (b): streaming ---------------------------------------------------------------

    def _stream_layer(
        self, layer_idx: int, q_cold: torch.Tensor, acc_o: torch.Tensor, acc_lse: torch.Tensor
    ) -> None:
        stager = self.backend.stager()
        if self._chunks is None:
            layout = self.storage.layout
            group = q_cold.shape[1] // layout.num_kv_heads
            self._chunks = plan_chunks(
                self.stream_parts,
                stager.chunk_blocks,
                layout.block_size,
                group,
                self.backend.config.max_rows_per_query,
                self.storage.device,
            )
        self._ensure_host_ready()
        num_chunks = len(self._chunks)
        num_items = self.storage.layout.num_layers * num_chunks
        for c, chunk in enumerate(self._chunks):
            item = layer_idx * num_chunks + c
            self._load(item, stager)
            stager.attend(item % 2, layer_idx, chunk, q_cold, self.scale, acc_o, acc_lse)
            if item + 1 < num_items:
                self._load(item + 1, stager)  # prefetch: the next chunk, or the next layer's first

    def _load(self, item: int, stager: StreamStager) -> None:
        assert self._chunks is not None
        buf = item % 2
        if self._loaded.get(buf) == item:
            return
        layer_idx, c = divmod(item, len(self._chunks))
        stager.load(buf, layer_idx, self._chunks[c])
        self._loaded[buf] = item
