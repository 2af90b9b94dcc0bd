"""Prefix KV blocks in files (`--kv-persist-dir`): written by a thread, crash-safe, found after a restart.

One file per block, `<block hash, 16 hex digits>.kvb`: the magic `KVSPBLK1`, a 4-byte little-endian
header length, the header (JSON: block hash, KV fingerprint, block shape, dtype, payload bytes,
CRC-32 of the payload), then the payload: the block's bytes in the storage layout (all layers,
K and V: `storage/storage.py`).

Invariants:
- A file appears under its final name only whole: written as `.tmp`, fsynced, renamed, and the
  directory fsynced. Leftover `.tmp` files (a crash mid-write) are removed on start.
- A file is loaded only when its header matches this engine (fingerprint, shape, dtype), its size
  is the header's plus the payload's and its CRC-32 matches; anything else is skipped with a
  warning, never loaded. Headers are checked on start (the index); the CRC on load.
- The index (hash -> file) covers this engine's files only: files of another model or layout in
  the same directory are left alone and not counted in the budget.
- Recency is the file's modification time (a load touches it), so LRU order survives restarts;
  after each write the least recently used files go until the total fits the budget.
- The writer thread only reads the tensors it is given; the caller keeps them unchanged until
  `take_written` returns their tokens (pinned cold blocks: `KVTierManager.release_pin`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import stat
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvspill.errors import PersistDirError
from kvspill.storage.storage import KVLayout

logger = logging.getLogger(__name__)
MAGIC = b"KVSPBLK1"
SUFFIX = ".kvb"
_HEADER_LEN = struct.Struct("<I")


def kv_fingerprint(identity: dict[str, Any]) -> int:
    """A 63-bit fingerprint of everything that changes a block's KV (model, dtypes, RoPE, layout).

    The seed of every request's block hashes (`scheduler/request.py`) and the check of every
    persisted file's header.
    """
    text = json.dumps(identity, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def model_identity(model: str | None) -> dict[str, Any]:
    """The model's name and, for a local file or directory, its files' sizes and modification times."""
    identity: dict[str, Any] = {"model": model}
    path = Path(model) if model else None
    if path is not None and path.exists():
        files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
        identity["files"] = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return identity


@dataclass(frozen=True)
class BlockFile:
    """What a block file's header says, as `kvspill cache ls` shows it."""

    path: Path
    block_hash: int
    fingerprint: int
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    crc32: int
    file_bytes: int
    mtime: float


def read_header(path: Path) -> BlockFile:
    """The header of a block file; ValueError when it is not one or is torn."""
    with path.open("rb") as f:
        head = f.read(len(MAGIC) + _HEADER_LEN.size)
        if len(head) < len(MAGIC) + _HEADER_LEN.size or head[: len(MAGIC)] != MAGIC:
            raise ValueError("not a kvspill block file (bad magic)")
        (length,) = _HEADER_LEN.unpack(head[len(MAGIC) :])
        try:
            header = json.loads(f.read(length))
            stat = os.fstat(f.fileno())
            info = BlockFile(
                path, int(header["hash"]), int(header["fingerprint"]), tuple(header["shape"]),
                str(header["dtype"]), int(header["nbytes"]), int(header["crc32"]), stat.st_size, stat.st_mtime,
            )  # fmt: skip
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"bad header ({e})") from e
    if info.file_bytes != len(head) + length + info.nbytes:
        raise ValueError(f"torn: {info.file_bytes} bytes, the header says {len(head) + length + info.nbytes}")
    return info


def scan_dir(directory: str | os.PathLike[str]) -> tuple[list[BlockFile], list[tuple[Path, str]]]:
    """Every block file's header under `directory`, and the files that are not valid (with why).
    Only regular files are opened: a FIFO named `*.kvb` would block the open forever."""
    good, bad = [], []
    for path in sorted(Path(directory).glob(f"*{SUFFIX}")):
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                bad.append((path, "not a regular file"))
                continue
            good.append(read_header(path))
        except (OSError, ValueError) as e:
            bad.append((path, str(e)))
    return good, bad


def clear_dir(directory: str | os.PathLike[str]) -> tuple[int, int]:
    """Delete every block file (and leftover .tmp) under `directory`; returns (files, bytes)."""
    num_files = num_bytes = 0
    for path in [*Path(directory).glob(f"*{SUFFIX}"), *Path(directory).glob(f"*{SUFFIX}.tmp")]:
        num_bytes += path.stat().st_size if path.is_file() else 0
        path.unlink()
        num_files += 1
    return num_files, num_bytes


class PersistStore:
    """This engine's block files under one directory: the index, the writer thread, loads."""

    def __init__(
        self, directory: str | os.PathLike[str], budget_bytes: int, fingerprint: int, layout: KVLayout
    ) -> None:
        self.directory = usable_dir(Path(directory))
        self.budget_bytes = budget_bytes
        self.fingerprint = fingerprint
        self.shape = layout.block_shape  # raw bytes for a mixed pool (storage/layout.py)
        self.dtype = layout.pool_dtype
        self.block_bytes = layout.block_bytes
        self._lock = threading.Lock()
        self._index: OrderedDict[int, BlockFile] = OrderedDict()  # least recently used first
        self._pending: set[int] = set()  # submitted, not written yet
        self._written: list[object] = []  # tokens of finished writes, for `take_written`
        self.num_written = self.num_loaded = self.bytes_loaded = self.num_skipped = 0
        self._read_index()
        self._queue: queue.Queue[tuple[int, torch.Tensor, object] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._writer, name="kvspill-kv-persist", daemon=True)
        self._thread.start()

    # ---- index -------------------------------------------------------------------------

    def _read_index(self) -> None:
        for tmp in self.directory.glob(f"*{SUFFIX}.tmp"):
            tmp.unlink(missing_ok=True)  # a write cut short by a crash
        good, bad = scan_dir(self.directory)
        for path, why in bad:
            logger.warning("kv persist: skipping %s: %s", path, why)
        for info in sorted(good, key=lambda i: i.mtime):
            mismatch = self._mismatch(info)
            if mismatch is None:
                self._index[info.block_hash] = info
            else:
                logger.warning("kv persist: skipping %s: %s", info.path, mismatch)
        self.num_skipped = len(good) + len(bad) - len(self._index)
        if self._index:
            logger.info(
                "kv persist: %d prefix blocks (%.1f MiB) in %s",
                len(self._index),
                self.nbytes / 2**20,
                self.directory,
            )

    def _mismatch(self, info: BlockFile) -> str | None:
        if info.fingerprint != self.fingerprint:
            return "written by another model or KV configuration (fingerprint differs)"
        if info.shape != self.shape or info.dtype != str(self.dtype) or info.nbytes != self.block_bytes:
            return (
                f"block layout {info.shape} {info.dtype} differs from this engine's {self.shape} {self.dtype}"
            )
        if info.path.name != _name(info.block_hash):
            return "its name does not match its block hash"
        return None

    @property
    def num_blocks(self) -> int:
        return len(self._index)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(info.file_bytes for info in self._index.values())

    def contains(self, block_hash: int) -> bool:
        with self._lock:
            return block_hash in self._index

    def remove(self, block_hashes: Sequence[int] | None = None) -> int:
        """Delete the files of these blocks (None: every file of this engine) and drop them from the
        index, so they are neither loaded nor counted and may be written again; returns how many
        files went. A write still queued lands afterwards (`flush` first to avoid that)."""
        with self._lock:
            wanted = self._index if block_hashes is None else block_hashes
            hashes = [h for h in wanted if h in self._index]
            gone = [self._index.pop(h) for h in hashes]
        for info in gone:
            info.path.unlink(missing_ok=True)
        return len(gone)

    # ---- writes --------------------------------------------------------------------------

    def submit(self, block_hash: int, block: torch.Tensor, token: object = None) -> bool:
        """Queue one block for writing; False (nothing queued) when it is stored or queued already."""
        with self._lock:
            if block_hash in self._index or block_hash in self._pending:
                return False
            self._pending.add(block_hash)
        self._queue.put((block_hash, block, token))
        return True

    def take_written(self) -> list[object]:
        """Tokens of the blocks written (or given up) since the last call: their tensors are free."""
        with self._lock:
            done, self._written = self._written, []
        return done

    def flush(self) -> None:
        """Wait until every queued block is written."""
        self._queue.join()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _writer(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                block_hash, block, token = item
                try:
                    info = self._write(block_hash, block)
                except OSError as e:
                    logger.warning("kv persist: could not write block %016x: %s", block_hash, e)
                    info = None
                with self._lock:
                    self._pending.discard(block_hash)
                    if info is not None:
                        self._index[block_hash] = info
                    self._written.append(token)
                self._evict_over_budget()
            finally:
                self._queue.task_done()

    def _write(self, block_hash: int, block: torch.Tensor) -> BlockFile:
        payload = memoryview(block.contiguous().view(torch.uint8).reshape(-1).numpy())  # type: ignore[arg-type]
        crc = zlib.crc32(payload)
        header = json.dumps(
            dict(hash=block_hash, fingerprint=self.fingerprint, shape=list(self.shape),
                 dtype=str(self.dtype), nbytes=payload.nbytes, crc32=crc)
        ).encode()  # fmt: skip
        path = self.directory / _name(block_hash)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with tmp.open("wb") as f:
                f.write(MAGIC + _HEADER_LEN.pack(len(header)) + header)
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk: the partial file goes now, not at the next start
            raise
        _fsync_dir(self.directory)
        self.num_written += 1
        size = len(MAGIC) + _HEADER_LEN.size + len(header) + payload.nbytes
        return BlockFile(
            path,
            block_hash,
            self.fingerprint,
            self.shape,
            str(self.dtype),
            payload.nbytes,
            crc,
            size,
            time.time(),
        )

    def _evict_over_budget(self) -> None:
        with self._lock:
            total = sum(info.file_bytes for info in self._index.values())
            victims = []
            while total > self.budget_bytes and self._index:
                _, info = self._index.popitem(last=False)
                total -= info.file_bytes
                victims.append(info.path)
        for path in victims:
            path.unlink(missing_ok=True)

    # ---- loads ---------------------------------------------------------------------------

    def load_into(self, block_hash: int, dst: torch.Tensor) -> bool:
        """Copy a stored block into `dst` (one block of a host tier); False, with a warning, when the
        file is gone, torn or corrupt (it is then dropped from the index; `kvspill cache clear`
        deletes it)."""
        with self._lock:
            info = self._index.get(block_hash)
        if info is None:
            return False
        # The payload is read straight into `dst` (no staging buffer to zero and copy): on a failed
        # check `dst` holds garbage, and the caller frees that block instead of caching it.
        out = dst if dst.is_contiguous() else torch.empty_like(dst)
        payload = memoryview(out.view(torch.uint8).reshape(-1).numpy())  # type: ignore[arg-type]
        try:
            if payload.nbytes != info.nbytes:
                raise ValueError(f"holds {info.nbytes} bytes, not the {payload.nbytes} of a block here")
            with info.path.open("rb") as f:
                f.seek(info.file_bytes - info.nbytes)
                if f.readinto(payload) != info.nbytes or f.read(1):
                    raise ValueError(f"torn: the file is not the {info.file_bytes} bytes indexed")
            if zlib.crc32(payload) != info.crc32:
                raise ValueError("checksum mismatch: the file is corrupt")
        except (OSError, ValueError) as e:
            logger.warning("kv persist: skipping %s: %s", info.path, e)
            with self._lock:
                self._index.pop(block_hash, None)
                self.num_skipped += 1
            return False
        if out is not dst:
            dst.copy_(out)
        os.utime(info.path)  # most recently used, across restarts too
        with self._lock:  # loads run on several threads (engine/persist.py)
            if block_hash in self._index:
                self._index.move_to_end(block_hash)
            self.num_loaded += 1
            self.bytes_loaded += info.file_bytes
        return True


def usable_dir(directory: Path) -> Path:
    """`directory`, created if missing; a PersistDirError naming the flag when it cannot be a
    writable directory (a file, a path under a file, no rights)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PersistDirError(
            f"--kv-persist-dir {directory}: cannot create it ({e.strerror or e}): give a writable directory"
        ) from e
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PersistDirError(
            f"--kv-persist-dir {directory}: not writable by this user: give a writable directory"
        )
    return directory


def _name(block_hash: int) -> str:
    return f"{block_hash:016x}{SUFFIX}"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
