"""The records and errors of cache management by prefix (`/v1/kv/prefixes|lookup|pin|unpin|move|clear`).

The contract between `kv/prefix_control.py`, which fills them on the engine thread, and the
server and CLI, which show them (as `stats.py` is for `/v1/kv`): plain data, no engine part, so
the server reads them without importing `kvspill.kv`. `to_json` is each route's body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvspill.errors import KvspillError


class UnknownPrefixError(KvspillError):
    """No cached prefix has this name (HTTP 404)."""

    param = "prefix"


class KVConflictError(KvspillError):
    """The tier has no room for the move, or the pin would pass --kv-pin-share (HTTP 409)."""


@dataclass(frozen=True)
class PrefixInfo:
    """One row of `GET /v1/kv/prefixes`."""

    prefix_id: str
    num_tokens: int  # tokens of its chain (full blocks)
    num_cached_tokens: int  # its leading tokens some tier holds (what a request can reuse)
    block_ids: dict[str, list[int]]  # tier name -> ids of its cached blocks there, chain order
    hits: int
    last_use: float  # wall-clock seconds
    pinned: str | None  # tier name
    persisted: bool | None  # every block in --kv-persist-dir; None: no persist dir

    def to_json(self, with_block_ids: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prefix": self.prefix_id,
            "tokens": self.num_tokens,
            "cached_tokens": self.num_cached_tokens,
            "blocks": {name: len(ids) for name, ids in self.block_ids.items()},
            "hits": self.hits,
            "last_use": round(self.last_use, 3),
            "pinned": self.pinned,
            "persisted": self.persisted,
        }
        if with_block_ids:
            body["block_ids"] = self.block_ids
        return body


@dataclass(frozen=True)
class LookupResult:
    """`POST /v1/kv/lookup`: how many leading tokens of a prompt the tiers hold, and where."""

    num_prompt_tokens: int
    cached_tokens: dict[str, int]  # tier name -> tokens found there (leading run, lookup order)
    num_persisted_tokens: int | None  # leading tokens the tiers or --kv-persist-dir hold; None: no dir
    prefix_id: str | None  # the listed prefix it matches best (a name for pin/move), if any

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.num_prompt_tokens,
            "cached_tokens": sum(self.cached_tokens.values()),
            "tiers": self.cached_tokens,
            "persisted_tokens": self.num_persisted_tokens,
            "prefix": self.prefix_id,
        }


@dataclass(frozen=True)
class OpResult:
    """What pin, unpin, move and clear did."""

    op: str
    prefix_id: str | None  # None: clear of every prefix
    tier: str | None
    num_blocks: int  # blocks pinned, unpinned, moved or uncached
    num_blocks_in_use: int = 0  # left where they were: held by running requests or other pins
    num_persisted_files: int = 0  # clear: files removed from --kv-persist-dir
    block_size: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "prefix": self.prefix_id,
            "tier": self.tier,
            "blocks": self.num_blocks,
            "tokens": self.num_blocks * self.block_size,
            "blocks_in_use": self.num_blocks_in_use,
            "persisted_files_removed": self.num_persisted_files,
        }
