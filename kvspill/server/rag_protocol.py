"""Request models of the RAG routes (pydantic v2): /v1/embeddings (OpenAI's shape), /embed,
/precache/repo (answered when done, or at once as a job with `"async": true`) and /search.

Invariants: wrong types fail validation (a 400 from the app's handler); unknown fields are
ignored, as in `protocol.py`; value checks that need the model live in `RagService`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvspill.errors import InvalidParameterError
from kvspill.rag.files import FileFilter
from kvspill.rag.types import ChunkingConfig


class EmbeddingRequest(BaseModel):
    """OpenAI `POST /v1/embeddings`."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    def texts_or_ids(self) -> tuple[list[str] | None, list[list[int]] | None]:
        """(texts, None) for text input, (None, token id lists) for token ids."""
        value = self.input
        if isinstance(value, str):
            return [value], None
        if value and all(isinstance(v, int) for v in value):
            return None, [value]  # type: ignore[list-item]
        if value and all(isinstance(v, list) for v in value):
            return None, value  # type: ignore[return-value]
        return list(value), None  # type: ignore[arg-type]


class EmbedRequest(BaseModel):
    """`POST /embed`: texts -> vectors through the cache."""

    model_config = ConfigDict(extra="ignore")

    texts: str | list[str]
    use_cache: bool = True

    def text_list(self) -> list[str]:
        return [self.texts] if isinstance(self.texts, str) else list(self.texts)


class PrecacheRequest(BaseModel):
    """`POST /precache/repo`: index a directory under the server's --rag-root (outside it: 403)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    path: str
    include: list[str] = Field(default_factory=list, description="gitignore-style globs; empty: all files")
    exclude: list[str] = Field(default_factory=list)
    respect_gitignore: bool = True
    chunk_lines: int = Field(ChunkingConfig.chunk_lines, ge=1, le=10_000)
    overlap_lines: int = Field(ChunkingConfig.overlap_lines, ge=0)
    allow_removal: bool = Field(
        False, description="let this re-index drop more indexed files than it adds (off: a 400 says how many)"
    )
    run_async: bool = Field(
        False,
        alias="async",
        description="answer 202 with the job at once (poll GET /precache/jobs/{id}); off: the report when done",
    )

    def file_filter(self) -> FileFilter:
        return FileFilter(tuple(self.include), tuple(self.exclude), self.respect_gitignore)

    def chunking(self) -> ChunkingConfig:
        try:
            return ChunkingConfig(self.chunk_lines, self.overlap_lines)
        except ValueError as e:
            raise InvalidParameterError("overlap_lines", str(e)) from e


class SearchRequest(BaseModel):
    """`POST /search`: the chunks that best match a query (`RagService.search`)."""

    model_config = ConfigDict(extra="ignore")

    query: str
    top_k: int = Field(5, ge=1)
    repo: str | None = None
    mode: Literal["hybrid", "dense"] = Field(
        "hybrid",
        description="hybrid: the embedding and full-text (identifier) rankings fused; dense: the embedding ranking alone",
    )
