"""Cut a file's text into overlapping runs of lines.

Invariants:
- Every line of the file is in at least one chunk; chunk k starts `chunk_lines - overlap_lines`
  lines after chunk k-1; the last chunk ends at the file's last line and is not a mere tail of
  its predecessor (a short file is one chunk).
- Blank-only chunks are dropped (they carry nothing to search for).
- Line numbers are 1-based and inclusive.
"""

from __future__ import annotations

from kvspill.rag.types import Chunk, ChunkingConfig


def chunk_lines(text: str, config: ChunkingConfig) -> list[Chunk]:
    """The chunks of `text` (a file's content) under `config`."""
    lines = text.splitlines()
    step = config.chunk_lines - config.overlap_lines
    chunks: list[Chunk] = []
    start = 0
    while start < len(lines):
        end = min(start + config.chunk_lines, len(lines))
        body = "\n".join(lines[start:end])
        if body.strip():
            chunks.append(Chunk(start + 1, end, body))
        if end == len(lines):
            break
        start += step
    return chunks


def chunk_embedding_text(path: str, chunk: Chunk) -> str:
    """What the model reads for a chunk: its path first, so that a query naming a module or a
    file finds it, then the lines themselves."""
    return f"{path}\n{chunk.text}"
