"""Contracts of the RAG service: chunks, index reports, search hits, limits, the embedder.

Invariants:
- Line numbers are 1-based and inclusive (`start_line..end_line`), as editors show them.
- Vectors are float32 rows of unit length (cosine similarity is a dot product).
- Torch-free: the model lives behind the `Embedder` protocol.
- `IndexProgress` is written by the one thread that indexes and read by others: plain ints and
  strings, each assignment atomic, so a reader sees each field current (not all at one instant).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from kvspill.rag.errors import IndexCancelledError


class Embedder(Protocol):
    """A text embedding model: unit-length float32 vectors of `dim` numbers."""

    # Read-only properties, so that `LazyEmbedder` (loaded on first use) is one too.
    @property
    def name(self) -> str:
        """The model's name as clients send it (e.g. "all-MiniLM-L6-v2")."""
        ...

    @property
    def dim(self) -> int:
        """Numbers per vector."""
        ...

    @property
    def max_seq_length(self) -> int:
        """Tokens per input the model reads; longer inputs are truncated."""
        ...

    @property
    def vocab_size(self) -> int: ...

    def encode(self, texts: list[str]) -> np.ndarray:
        """[num_texts, dim] float32, unit length."""
        ...

    def encode_ids(self, token_ids: list[list[int]]) -> np.ndarray:
        """[num_inputs, dim] for inputs given as token ids (without special tokens)."""
        ...

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model reads for each text (special tokens included, after truncation)."""
        ...


@dataclass(frozen=True)
class Chunk:
    """A run of lines of one file."""

    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str


@dataclass(frozen=True)
class ChunkingConfig:
    """How files are cut: `chunk_lines` lines a chunk, each sharing `overlap_lines` with the last."""

    chunk_lines: int = 20  # about 256 word pieces of code: all-MiniLM-L6-v2 reads 256 at most
    overlap_lines: int = 5

    def __post_init__(self) -> None:
        if self.chunk_lines < 1:
            raise ValueError(f"chunk_lines must be at least 1 (got {self.chunk_lines})")
        if not 0 <= self.overlap_lines < self.chunk_lines:
            raise ValueError(
                f"overlap_lines must be from 0 to chunk_lines - 1 = {self.chunk_lines - 1} "
                f"(got {self.overlap_lines})"
            )


@dataclass(frozen=True)
class RagLimits:
    """Request limits: past them a request is refused (400), never truncated in silence."""

    max_inputs: int = 2048  # texts in one embedding request (OpenAI's limit)
    max_input_chars: int = 200_000  # characters in one text
    max_file_bytes: int = 2 * 1024 * 1024  # a larger file is skipped (named in the report)
    max_files: int = 100_000  # files one /precache/repo may index
    max_top_k: int = 1000
    max_walk_seconds: float = 60.0  # listing a directory's files; past it a 400 names the deadline


@dataclass(frozen=True)
class SkippedFile:
    path: str  # relative to the indexed directory
    reason: str


@dataclass
class IndexReport:
    """What one `precache_repo` did."""

    repo: str  # the indexed directory, absolute
    num_files: int = 0  # files that passed the filters and were read
    num_files_changed: int = 0  # new or changed since the last index (chunked again)
    num_files_unchanged: int = 0  # same content hash: not even chunked
    num_files_removed: int = 0  # indexed before, gone now: their chunks were dropped
    num_chunks: int = 0  # chunks of the repo after this index
    num_chunks_embedded: int = 0  # chunks that ran through the model
    num_chunks_cached: int = 0  # chunks of changed files whose text was already in the cache
    seconds: float = 0.0
    skipped: list[SkippedFile] = field(default_factory=list)


@dataclass(frozen=True)
class SearchHit:
    repo: str
    path: str  # relative to repo
    start_line: int
    end_line: int
    score: float  # cosine similarity, -1..1 (in every search mode)
    text: str
    fused_score: float | None = None  # hybrid search: the reciprocal rank fusion score it is ranked by


@dataclass(frozen=True)
class EmbedResult:
    vectors: np.ndarray  # [num_texts, dim] float32
    cached: list[bool]  # per text: served from the cache


@dataclass
class IndexProgress:
    """How far one index has come, and its cancel flag (checked between directories, files and
    embedding batches; never inside the store's swap)."""

    # queued, waiting (another index of the same directory runs), listing, reading, embedding,
    # writing (the swap: past the last cancel check), finished
    phase: str = "queued"
    num_files_listed: int = 0  # files that passed the filters so far
    num_files_read: int = 0  # of those, read and hashed (unchanged ones included)
    num_chunks_to_embed: int | None = None  # chunk texts not in the cache; known once all files are read
    num_chunks_embedded: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""

    def request_cancel(self, reason: str) -> None:
        """Ask the index to stop at its next check (the first reason given is kept)."""
        if not self.cancel.is_set():
            self.cancel_reason = reason
            self.cancel.set()

    def check(self) -> None:
        """IndexCancelledError once a cancel was asked for."""
        if self.cancel.is_set():
            raise IndexCancelledError(self.cancel_reason)

    def line(self) -> str:
        """One line for a terminal: "reading: 120 of 400 files, 64 of 512 chunks embedded"."""
        embedded = (
            f", {self.num_chunks_embedded} of {self.num_chunks_to_embed} chunks embedded"
            if self.num_chunks_to_embed is not None
            else ""
        )
        return f"{self.phase}: {self.num_files_read} of {self.num_files_listed} files read{embedded}"
