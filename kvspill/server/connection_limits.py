"""The limits and terms a server puts on its connections, with their defaults (`kvspill serve` flags).

Invariants:
- Import-light (no uvicorn, fastapi or torch): the CLI reads these defaults in every process,
  `kvspill doctor` on the GPU image (which has no uvicorn) among them.
- Enforced by `server/slow_clients.py` (head and body timeouts, connections per client),
  `server/limits.py` (request bytes), `server/hosts.py` (Host names), `server/cors.py` (browser
  origins) and uvicorn (concurrency, keep-alive, TLS).
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
    tls: tuple[str, str] | None = None  # (key file, certificate file): HTTPS; None: plain HTTP


def check_tls_files(keyfile: str | None, certfile: str | None) -> tuple[str, str] | None:
    """--ssl-keyfile and --ssl-certfile: both or neither, and a pair that loads (a ValueError
    saying which flag to change), so a bad file stops the start, not the first connection."""
    if keyfile is None and certfile is None:
        return None
    if keyfile is None or certfile is None:
        missing = "--ssl-keyfile" if keyfile is None else "--ssl-certfile"
        raise ValueError(f"HTTPS needs both --ssl-keyfile and --ssl-certfile: give {missing} too")
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except FileNotFoundError as e:
        raise ValueError(f"--ssl-keyfile / --ssl-certfile: {e.filename} does not exist") from None
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"--ssl-certfile {certfile} with --ssl-keyfile {keyfile} do not load as a certificate and its "
            f"private key (PEM): {e}"
        ) from None
    return keyfile, certfile
