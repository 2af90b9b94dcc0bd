"""The engine's glue between the tiers' prefix caches and the persist dir (`--kv-persist-dir`).

After each step, blocks freed into a prefix cache are queued for the writer thread of
`storage/persist.py` (cpu blocks are read in place, pinned until written; gpu and disk blocks are
copied to host first, before the next `schedule()` can reuse them). Before each step, every request that
arrived since is looked up once: after its hits in the gpu/cpu/disk tiers, the blocks of its
prefix found in the persist dir are read into free cpu (then disk) blocks and cached there, so
the scheduler's prefix lookup takes them as cold hits; with no cold room (or no cold tier) into
free gpu blocks that cache nothing (at most half of the free ones), cached there as gpu hits.

Reads into the cpu and gpu tiers run on `LOAD_THREADS` threads while the engine goes on stepping the
running requests; the scheduler holds a request back (`holds`) until every block it waits for
is in (a block another request is loading counts too: it is read once). A block is allocated
(in use, so nothing evicts it) when its read starts and cached when it ends, on the engine
thread. Reads into the disk tier (the cpu tier full) stay on the engine thread: the disk tier's
file and its error handling belong to it.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import queue
from collections.abc import Collection
from dataclasses import dataclass
from functools import partial

import torch

from kvspill.errors import DiskTierIOError
from kvspill.kv.block_pool import KVBlock
from kvspill.kv.tiers import KVTierManager
from kvspill.scheduler.request import Request
from kvspill.storage.persist import PersistStore
from kvspill.storage.storage import TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

logger = logging.getLogger(__name__)

LOAD_THREADS = 8  # parallel block-file reads: one file per block, each read and checksummed
IDLE_WAIT_S = 0.05  # with nothing to run but held requests, wait this long for a read per step


@dataclass
class _Read:
    """One block file being read: into a cpu-tier block in place, or for a gpu block into `host`
    first (copied to the device on the engine thread)."""

    future: cf.Future[bool]
    cpu_block_id: int = -1
    gpu_block: KVBlock | None = None
    host: torch.Tensor | None = None


class PrefixPersister:
    def __init__(self, store: PersistStore, tiers: KVTierManager, storage: TieredKVStorage) -> None:
        self.store = store
        self.tiers = tiers
        self.storage = storage
        tiers.prefix.newly_cached = []  # from now on the tiers report (and pin) what enters their caches
        self._looked_up: set[str] = set()
        self._readers = cf.ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="kvspill-kv-load")
        self._reads: dict[int, _Read] = {}  # block hash -> its read in flight
        # hashes of finished reads, put by the reader threads: a step takes only what finished
        # (waiting on, or scanning, every read in flight was O(reads) per finished block: a
        # restart's 8,199-block prefix took 47 s to load instead of a few, H200)
        self._done: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._waits: dict[str, set[int]] = {}  # req_id -> hashes of the reads it waits for

    def holds(self, req_id: str) -> bool:
        """Whether the request waits for persisted blocks still being read (not admitted yet)."""
        return req_id in self._waits

    def after_step(self) -> None:
        """Unpin what the writer has read; queue what entered a prefix cache in this step."""
        for token in self.store.take_written():
            if token is not None:
                self.tiers.prefix.release_pin(*token)  # type: ignore[misc]
        on_disk: list[tuple[int, int]] = []
        for tier, block_id, block_hash in self.tiers.prefix.take_newly_cached():
            if tier == TIER_GPU:
                block = self.tiers.kv.block_pool.blocks[block_id]
                if block.block_hash != block_hash or self.store.contains(block_hash):
                    continue  # handed out again already (its hash went with it), or stored
                self.store.submit(block_hash, self.storage.kv_cache[block_id].to("cpu", copy=True))
            elif tier == TIER_DISK and not self.store.contains(block_hash):
                on_disk.append((block_id, block_hash))
            elif tier == TIER_DISK:
                self.tiers.prefix.release_pin(tier, block_id)
            elif not self.store.submit(block_hash, self.storage.pool(tier)[block_id], (tier, block_id)):
                self.tiers.prefix.release_pin(tier, block_id)
        if on_disk:
            self._submit_disk_blocks(on_disk)

    def _submit_disk_blocks(self, on_disk: list[tuple[int, int]]) -> None:
        """The disk tier is a file: one read of all its newly cached blocks (runs coalesce), copies
        queued for the writer, so their pins end now."""
        try:
            blocks = self.storage.read_blocks(TIER_DISK, [block_id for block_id, _ in on_disk])
        except DiskTierIOError as e:  # logged by the pool; these blocks are not persisted
            self.tiers.prefix.on_disk_error(e)
            blocks = None
        for i, (block_id, block_hash) in enumerate(on_disk):
            if blocks is not None:
                self.store.submit(block_hash, blocks[i])
            self.tiers.prefix.release_pin(TIER_DISK, block_id)

    def before_schedule(self, waiting: Collection[Request], idle: bool = False) -> None:
        """Finish the reads that are done; start reading the persisted prefix blocks of requests
        that arrived since the last step. `idle`: nothing runs, so wait a little for a read."""
        first = None
        if idle and self._reads and any(r.req_id in self._waits for r in waiting):
            try:
                first = self._done.get(timeout=IDLE_WAIT_S)
            except queue.Empty:
                pass
        self._finish_reads(first)
        for request in waiting:
            # (a request scoring its prompt takes no prefix hits: nothing to read for it)
            if (
                request.req_id not in self._looked_up
                and not request.num_computed_tokens
                and request.sampling_params.prompt_logprobs is None
            ):
                self._looked_up.add(request.req_id)
                self._load_prefix(request)
        if len(self._looked_up) > 4 * len(waiting) + 64:
            self._looked_up.intersection_update(r.req_id for r in waiting)
        if self._waits:  # an aborted request waits for nothing
            ids = {r.req_id for r in waiting}
            self._waits = {req_id: hashes for req_id, hashes in self._waits.items() if req_id in ids}

    def _load_prefix(self, request: Request) -> None:
        hits, _ = self.tiers.get_computed_blocks(request)
        max_num_blocks = (request.num_tokens - 1) // self.tiers.block_size
        hashes = request.block_hashes[len(hits) : max_num_blocks]
        waits: set[int] = set()
        gpu_blocks: list[KVBlock] | None = None  # taken when the cold tiers have no room left
        for i, block_hash in enumerate(hashes):
            if block_hash in self._reads:  # another request's read: wait for it too
                waits.add(block_hash)
                continue
            if not self.store.contains(block_hash):
                break
            slot = self.tiers.prefix.allocate_for_load()
            if slot is not None and slot[0] == TIER_DISK:
                ok = self._load_disk_block(block_hash, slot[1])
                self.tiers.prefix.finish_load(TIER_DISK, slot[1], block_hash if ok else None)
                if not ok:
                    break
                continue
            if slot is not None:
                read = _Read(
                    self._readers.submit(
                        self.store.load_into, block_hash, self.storage.pool(TIER_CPU)[slot[1]]
                    ),
                    cpu_block_id=slot[1],
                )
            else:  # into the gpu tier (no cold tier, or full): blocks that cache nothing, at most half the free ones
                if gpu_blocks is None:
                    pool = self.tiers.kv.block_pool
                    gpu_blocks = pool.take_uncached(min(len(hashes) - i, pool.num_free_blocks // 2))
                if not gpu_blocks:
                    break
                host = torch.empty(self.store.shape, dtype=self.store.dtype)
                read = _Read(
                    self._readers.submit(self.store.load_into, block_hash, host),
                    gpu_block=gpu_blocks.pop(0),
                    host=host,
                )
            self._reads[block_hash] = read
            read.future.add_done_callback(partial(self._read_done, block_hash))
            waits.add(block_hash)
        if gpu_blocks:
            self.tiers.kv.block_pool.free(gpu_blocks)  # taken but not needed
        if waits:
            self._waits[request.req_id] = waits

    def _read_done(self, block_hash: int, _future: cf.Future[bool]) -> None:
        self._done.put(block_hash)  # on the reader thread (or here, when it finished already)

    def _finish_reads(self, first: int | None = None) -> None:
        """Cache every finished read's block (or free it, after a failed read) and let go of the
        requests that waited for nothing else. `first`: a finished hash taken off the queue."""
        done = [] if first is None else [first]
        while True:
            try:
                done.append(self._done.get_nowait())
            except queue.Empty:
                break
        for block_hash in done:
            read = self._reads.pop(block_hash)
            try:
                ok = read.future.result()
            except Exception:  # noqa: BLE001 - a failed read: the block is computed instead
                logger.exception("kv persist: reading a block failed")
                ok = False
            if read.gpu_block is None:
                self.tiers.prefix.finish_load(TIER_CPU, read.cpu_block_id, block_hash if ok else None)
                continue
            if ok:
                assert read.host is not None
                self.storage.kv_cache[read.gpu_block.block_id].copy_(read.host)
            self.tiers.kv.block_pool.cache_loaded(read.gpu_block, block_hash if ok else None)
        if done:
            finished = set(done)
            for req_id in list(self._waits):
                self._waits[req_id] -= finished
                if not self._waits[req_id]:
                    del self._waits[req_id]

    def _load_disk_block(self, block_hash: int, block_id: int) -> bool:
        """Read a persisted block into the disk tier's file (through host memory), on this thread."""
        layout = self.storage.layout
        block = torch.empty((1, *layout.block_shape), dtype=layout.pool_dtype)
        if not self.store.load_into(block_hash, block[0]):
            return False
        try:
            self.storage.write_blocks(TIER_DISK, [block_id], block)
        except DiskTierIOError as e:  # logged by the pool; no more spills there
            self.tiers.prefix.on_disk_error(e)
            return False
        return True

    def close(self) -> None:
        self._readers.shutdown(wait=True)
        self._finish_reads()
        self.store.flush()
        self.store.close()
