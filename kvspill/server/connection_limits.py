"""The limits a server puts on its connections, with their defaults (`kvspill serve` flags).

Invariants:
- Import-light (no uvicorn, fastapi or torch): the CLI reads these defaults in every process,
  `kvspill doctor` on the GPU image (which has no uvicorn) among them.
- Enforced by `server/slow_clients.py` (head and body timeouts, connections per client),
  `server/limits.py` (request bytes), `server/hosts.py` (Host names) and uvicorn (concurrency,
  keep-alive).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0  # a 64 MiB body (the largest --max-request-bytes default) at 2+ MB/s
DEFAULT_LIMIT_CONCURRENCY = 1024
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 256  # a quarter of --limit-concurrency's default
DEFAULT_KEEP_ALIVE_S = 5


@dataclass
class ConnectionLimits:
    allowed_hosts: set[str] | None = None  # None: any Host
    max_request_bytes: int | None = None
    limit_concurrency: int | None = None
    timeout_keep_alive: int = DEFAULT_KEEP_ALIVE_S
    header_timeout: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    allowed_origins: tuple[str, ...] | None = None  # browser pages that may call (None: loopback; cors.py)
