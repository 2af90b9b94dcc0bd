"""Find the OpenAI-compatible servers already running on this host: each port of a list is asked
for `GET /health`, and where something answers, for `GET /v1/models`.

Invariants:
- A port where nothing listens is left out; one that answers /health with anything is listed,
  healthy only on a 200, with the model ids of /v1/models (or why they are not shown).
- The manager's API key is sent only to the manager's own child (`own_port`): another process
  on a probed port never learns it; a server behind its own key is listed as "needs its key".
- Probes run in parallel with a short timeout: a listing of 11 ports takes at most about one timeout.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

DEFAULT_PORTS = "8000-8010"
MAX_PORTS = 256  # a probe list is a handful of ports, not a port scan


@dataclass(frozen=True)
class FoundServer:
    port: int
    url: str
    healthy: bool
    models: list[str] = field(default_factory=list)
    note: str | None = None  # why models are not shown, or what /health said
    managed: bool = False  # the manager's own child

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_ports(text: str) -> list[int]:
    """`8000-8010,9000` as a sorted list of ports; ValueError saying what to change."""
    ports: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(
                f"--probe-ports takes ports and ranges like 8000-8010,9000, not {part!r}"
            ) from None
        if not 0 < first <= last < 65536:
            raise ValueError(f"--probe-ports: {part!r} is not a range of TCP ports (1-65535, low-high)")
        ports.update(range(first, last + 1))
    if len(ports) > MAX_PORTS:
        raise ValueError(f"--probe-ports lists {len(ports)} ports: give at most {MAX_PORTS}")
    return sorted(ports)


def probe(host: str, port: int, api_key: str | None, timeout_s: float) -> FoundServer | None:
    url = f"http://{host}:{port}"
    with httpx.Client(timeout=timeout_s) as client:
        try:
            health = client.get(url + "/health")
        except httpx.HTTPError:
            return None  # nothing listens there (or it does not speak HTTP)
        healthy = health.status_code == 200
        note = None if healthy else f"/health answered {health.status_code} (loading?)"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            models = client.get(url + "/v1/models", headers=headers)
        except httpx.HTTPError as e:
            return FoundServer(port, url, healthy, [], f"/v1/models: {type(e).__name__}", api_key is not None)
    managed = api_key is not None
    if models.status_code == 401:
        return FoundServer(port, url, healthy, [], "needs its own API key to list its models", managed)
    try:
        ids = [str(m["id"]) for m in models.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return FoundServer(
            port, url, healthy, [], note or f"/v1/models answered {models.status_code}", managed
        )
    return FoundServer(port, url, healthy, ids, note, managed)


def discover(
    ports: list[int], own_port: int, api_key: str, host: str = "127.0.0.1", timeout_s: float = 0.5
) -> list[FoundServer]:
    """The servers answering on `ports` (and on `own_port`, the manager's child), by port."""
    wanted = sorted({*ports, own_port})
    with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
        found = pool.map(lambda p: probe(host, p, api_key if p == own_port else None, timeout_s), wanted)
        return [f for f in found if f is not None]
