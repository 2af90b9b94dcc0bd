"""The disk KV tier: `num_blocks` blocks in one file, read and written with explicit file I/O.

Why not a memory map: an I/O error under a mapping (a media error, the file truncated by
someone, the filesystem gone) is a SIGBUS when the page is touched, and the process dies
(issue 21). Through `os.preadv`/`os.pwritev` the same error is an exception: a
`DiskTierIOError` (kvspill/errors.py) naming the file, byte offset and block ids. The step that
needed the blocks fails; the engine's failed-step machinery (engine/step_retry.py) retries its requests
one at a time, and the tiers retire the unreadable blocks or stop spilling to the disk tier
after a failed write (`ColdPrefixCache.on_disk_error`).

File layout, layer-major: `[num_layers, num_blocks, 2, block_size, num_kv_heads, row_dim]`
(`KVLayout.row_dim`: head_dim, or head_dim + 4 for int8 blocks, which carry their scales; in a
mixed pool, storage/layout.py, each layer's region of `num_blocks * layer_bytes(layer)` bytes).
The readers that attend cold blocks want one layer of many blocks at a time (`read_layer`):
a run of consecutive block ids of one layer is one contiguous range, so one syscall per run.
Whole blocks (`read_blocks`/`write_blocks`: tier moves, summaries, the persist dir) cost one
syscall per layer and run, scattered straight into (or gathered from) the block-major host
tensor with one iovec per block.

Space is reserved at creation (`posix_fallocate`): a disk too small for the budget fails here, as
a `DiskTierError` naming the numbers. The file is unlinked at once (the open descriptor keeps it),
so a crashed engine leaves no stale spill files.

Reads run on a few threads (`read_threads`; `os.preadv` releases the GIL): one thread copying
from the page cache reached about 1.3-1.5 GB/s on the GPU hosts, which made a 128K prefix hit from
the disk tier (9.8 GB read) take 7.5 s. Runs are cut into pieces of `_READ_PIECE_BYTES` so one
long run (a prefix's consecutive blocks) spreads over the threads too; small reads stay on the
calling thread (`_PARALLEL_READ_MIN_BYTES`).

Invariants: reads and writes use explicit offsets (no shared file position), so several threads
may read at once. A block whose last write failed reads as a `DiskTierIOError` until it is
written again: a failed spill never hands stale bytes to attention. After a failed write, or a
read that found the file shorter than reserved (truncated by someone), the pool is `broken`
and refuses every write: a write past the end would extend the file with holes, and blocks
lost to the truncation would then read as zeros instead of as errors.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from kvspill.errors import DiskTierError, DiskTierIOError
from kvspill.storage.layout import KVLayout

logger = logging.getLogger(__name__)
MiB = 1 << 20
_MAX_IOVECS = 1024  # Linux's IOV_MAX: buffers per preadv/pwritev call
_READ_PIECE_BYTES = 8 * 2**20  # a read task: big enough that a syscall's cost is noise
# Reads below this many bytes in all stay on the calling thread: handing small reads to other
# threads cost more than it saved (on 2 busy cores, where OpenMP workers spin after each torch
# op, a prefix-bench step of ~50 small runs took 0.5 s on threads against 0.02 s without).
_PARALLEL_READ_MIN_BYTES = 32 * 2**20
_MAX_READ_THREADS = 8


def default_read_threads() -> int:
    """Threads reading the disk tier: the cores, up to `_MAX_READ_THREADS`."""
    return max(1, min(_MAX_READ_THREADS, os.cpu_count() or 1))


def block_runs(ids: np.ndarray) -> list[tuple[int, int, int]]:
    """(position in `ids`, first id, length) of each run of consecutive ids, in order."""
    if len(ids) == 0:
        return []
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate(([0], breaks))
    lengths = np.diff(np.concatenate((starts, [len(ids)])))
    return list(zip(starts.tolist(), ids[starts].tolist(), lengths.tolist(), strict=True))


def _bytes(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous host tensor (numpy has no bfloat16: go through bytes)."""
    assert t.is_contiguous() and t.device.type == "cpu", "file I/O needs a contiguous host tensor"
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]


class DiskPool:
    """`num_blocks` KV blocks of `layout` in a file under `directory` (see the module docstring)."""

    def __init__(
        self,
        layout: KVLayout,
        num_blocks: int,
        directory: str | os.PathLike[str] | None,
        read_threads: int | None = None,
    ) -> None:
        self.layout = layout
        self.num_blocks = num_blocks
        self.read_threads = read_threads if read_threads is not None else default_read_threads()
        assert self.read_threads >= 1, f"read_threads must be at least 1, got {self.read_threads}"
        self._readers: ThreadPoolExecutor | None = None  # made on the first parallel read
        self.directory = Path(directory) if directory is not None else Path(tempfile.gettempdir())
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="kvspill-kv-", suffix=".bin", dir=self.directory)
        except OSError as e:
            raise DiskTierError(
                f"cannot create the disk KV tier in {self.directory}: {e.strerror or e}: "
                "give a writable --kv-disk-dir"
            ) from e
        self.reserved_bytes = max(num_blocks, 1) * layout.block_bytes
        try:
            _reserve(fd, self.reserved_bytes, self.directory)
        except BaseException:
            os.close(fd)
            raise
        finally:
            os.unlink(name)
        self.fd = fd
        self.path = name + " (deleted)"  # for error messages: it lives on through the descriptor
        self._closer = weakref.finalize(self, os.close, fd)
        self._unwritten = np.zeros(num_blocks, dtype=bool)  # the last write of the block failed
        self.num_read_errors = 0
        self.num_write_errors = 0
        self.broken: str | None = None  # why the pool takes no more writes

    @property
    def nbytes(self) -> int:
        return self.num_blocks * self.layout.block_bytes

    def close(self) -> None:
        if self._readers is not None:
            self._readers.shutdown(wait=True)
            self._readers = None
        self._closer()

    # ---- reads -----------------------------------------------------------------------------

    def read_layer(self, block_ids: np.ndarray, layer_idx: int, out: torch.Tensor) -> None:
        """out[i] = layer `layer_idx` of block block_ids[i]; out: [n, 2, block_size, num_kv_heads,
        row_dim] contiguous on the host. The ids are read in ascending order, one syscall per run
        of consecutive ids (up to `_MAX_IOVECS` slices of `out`, one per run of its positions)."""
        ids = self._checked(block_ids, out.shape[0])
        layout = self.layout
        assert tuple(out.shape[1:]) == layout.layer_shape(layer_idx) and out.dtype == layout.dtype_of(
            layer_idx
        )
        raw = _bytes(out)
        lb = layout.layer_bytes(layer_idx)
        argsort = np.argsort(ids, kind="stable")
        # None: ascending already (the usual case), so runs of ids are runs of positions too
        order = None if bool(np.all(np.diff(argsort) == 1)) else argsort
        sorted_ids = ids if order is None else ids[order]
        reads = []
        for start, first, n in self._chunks(sorted_ids, _READ_PIECE_BYTES // lb):
            offset = self._file_offset(layer_idx, first)
            if order is None:
                buffers = [raw[start * lb : (start + n) * lb]]
            else:
                positions = order[start : start + n]
                buffers = [raw[p * lb : (p + k) * lb] for _, p, k in block_runs(positions)]
            reads.append((buffers, offset, sorted_ids[start : start + n]))
        self._read_all(reads)

    def read_blocks(self, block_ids: np.ndarray, out: torch.Tensor) -> None:
        """out[i] = every layer of block block_ids[i]; out: [n, num_layers, 2, block_size,
        num_kv_heads, row_dim] contiguous on the host. One syscall per layer and run (at most
        `_MAX_IOVECS` blocks), scattering straight into `out`."""
        ids = self._checked(block_ids, out.shape[0])
        raw = _bytes(out)
        reads = [
            (
                self._iovecs(raw, pos, n, layer),
                self._file_offset(layer, first),
                ids[pos : pos + n],
            )
            for pos, first, n in self._chunks(ids, _READ_PIECE_BYTES // self.layout.max_layer_bytes)
            for layer in range(self.layout.num_layers)
        ]
        self._read_all(reads)

    def _read_all(self, reads: Sequence[tuple[list[memoryview], int, np.ndarray]]) -> None:
        """Every (views, offset, ids) read, on `read_threads` threads when there are several; the
        first error is raised after all have ended (the others' buffers are then undefined)."""
        total = sum(len(v) for views, _, _ in reads for v in views)
        if len(reads) <= 1 or self.read_threads <= 1 or total < _PARALLEL_READ_MIN_BYTES:
            for views, offset, ids in reads:
                self._pread(views, offset, ids)
            return
        if self._readers is None:
            self._readers = ThreadPoolExecutor(self.read_threads, thread_name_prefix="kvspill-disk-read")
        futures = [self._readers.submit(self._pread, *read) for read in reads]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise errors[0]

    # ---- writes ----------------------------------------------------------------------------

    def write_blocks(self, block_ids: np.ndarray, src: torch.Tensor) -> None:
        """Block block_ids[i] = src[i] ([n, num_layers, 2, block_size, num_kv_heads, head_dim],
        contiguous on the host). On an error the blocks not written for sure (the failed run and
        the rest) read as errors until written again, and the error is raised."""
        ids = self._checked(block_ids, src.shape[0], reading=False)
        if len(ids) and self.broken is None:
            self._check_size()
        if self.broken is not None and len(ids):
            self._unwritten[ids] = True
            detail = f"the tier takes no more writes ({self.broken})"
            raise self._error("write", self._file_offset(0, int(ids[0])), ids, detail, errno.EIO)
        raw = _bytes(src)
        for pos, first, n in self._chunks(ids):
            try:
                for layer in range(self.layout.num_layers):
                    offset = self._file_offset(layer, first)
                    self._pwrite(self._iovecs(raw, pos, n, layer), offset, ids[pos : pos + n])
            except DiskTierIOError:
                self._unwritten[ids[pos:]] = True
                raise
            self._unwritten[ids[pos : pos + n]] = False

    # ---- helpers ---------------------------------------------------------------------------

    def _checked(self, block_ids: np.ndarray, n: int, reading: bool = True) -> np.ndarray:
        ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
        assert len(ids) == n, f"{len(ids)} block ids for {n} blocks"
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.num_blocks):
            raise IndexError(f"disk block ids outside [0, {self.num_blocks})")
        if reading and len(ids) and self._unwritten[ids].any():
            bad = ids[self._unwritten[ids]]
            offset = self._file_offset(0, int(bad[0]))
            raise self._error("read", offset, bad, "an earlier write of these blocks failed", errno.EIO)
        return ids

    def _check_size(self) -> None:
        """A file shorter than reserved was truncated by someone: writing past its end would
        extend it with holes, where lost blocks would read as zeros, not as errors."""
        try:
            size = os.fstat(self.fd).st_size
        except OSError as e:
            self.broken = f"the file cannot be examined: {e.strerror or e}"
            return
        if size < self.reserved_bytes:
            self.broken = f"the file was truncated to {size} of {self.reserved_bytes} bytes"

    def _chunks(self, ids: np.ndarray, most_blocks: int = _MAX_IOVECS) -> list[tuple[int, int, int]]:
        """Runs of consecutive ids, cut to at most `most_blocks` and `_MAX_IOVECS` blocks (one
        iovec per block)."""
        most = max(1, min(_MAX_IOVECS, most_blocks))
        return [
            (pos + c, first + c, min(most, n - c))
            for pos, first, n in block_runs(ids)
            for c in range(0, n, most)
        ]

    def _iovecs(self, raw: memoryview, pos: int, n: int, layer: int) -> list[memoryview]:
        """Layer `layer` of blocks pos..pos+n-1 of a [n, num_layers, ...] host buffer, one slice each."""
        lb, block = self.layout.layer_bytes(layer), self.layout.block_bytes
        start = pos * block + self.layout.layer_offsets[layer]
        return [raw[start + i * block : start + i * block + lb] for i in range(n)]

    def _file_offset(self, layer: int, block_id: int) -> int:
        """Where layer `layer` of block `block_id` starts in the file (layer-major)."""
        return self.num_blocks * self.layout.layer_offsets[layer] + block_id * self.layout.layer_bytes(layer)

    def _pread(self, views: list[memoryview], offset: int, ids: np.ndarray) -> None:
        """Fill `views` from `offset` on; a short read resumes where it stopped, an end of file
        (the file truncated) or an OSError is a DiskTierIOError."""
        done = 0
        while views:
            try:
                got = os.preadv(self.fd, views, offset + done)
            except OSError as e:
                raise self._error("read", offset + done, ids, e.strerror or str(e), e.errno) from e
            if got == 0:
                self.broken = "the file was found truncated"
                detail = "the file ends before the block (truncated?)"
                raise self._error("read", offset + done, ids, detail, errno.EIO)
            done += got
            views = _advance(views, got)

    def _pwrite(self, buffers: list[memoryview], offset: int, ids: np.ndarray) -> None:
        done = 0
        while buffers:
            try:
                put = os.pwritev(self.fd, buffers, offset + done)
            except OSError as e:
                self.broken = f"a write failed: {e.strerror or e}"
                raise self._error("write", offset + done, ids, e.strerror or str(e), e.errno) from e
            if put == 0:
                self.broken = "a write wrote nothing"
                raise self._error("write", offset + done, ids, "nothing written", errno.EIO)
            done += put
            buffers = _advance(buffers, put)

    def _error(self, op: str, offset: int, ids: np.ndarray, detail: str, code: int | None) -> DiskTierIOError:
        if op == "read":
            self.num_read_errors += 1
        else:
            self.num_write_errors += 1
        block_ids = tuple(ids.tolist())
        error = DiskTierIOError(
            op, self.path, offset, block_ids, detail, code or errno.EIO, self.broken is not None
        )
        logger.error("%s", error)
        return error


def _advance(views: list[memoryview], num_bytes: int) -> list[memoryview]:
    """The part of `views` after its first `num_bytes` bytes (a short read or write goes on there)."""
    i = 0
    while i < len(views) and num_bytes >= len(views[i]):
        num_bytes -= len(views[i])
        i += 1
    rest = views[i:]
    if rest and num_bytes:
        rest[0] = rest[0][num_bytes:]
    return rest


def _reserve(fd: int, num_bytes: int, directory: Path) -> None:
    """Give the file `num_bytes` of real disk space, or raise DiskTierError with the numbers."""
    try:
        os.posix_fallocate(fd, 0, num_bytes)
    except OSError as e:
        free = shutil.disk_usage(directory).free
        raise DiskTierError(
            f"the disk KV tier needs {num_bytes / MiB:.1f} MiB in {directory} but could not reserve it "
            f"({e.strerror or e}; {free / MiB:.1f} MiB free there): lower --disk-kv-budget or give a "
            "--kv-disk-dir with more space"
        ) from e
