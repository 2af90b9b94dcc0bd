"""The kvspill server's KV tiers and queue, read over HTTP: `GET {url}/v1/kv`, then `/metrics`.

`/v1/kv` returns `engine.kv_stats()` as JSON (`KVStats.to_json()`, kvspill/stats.py); the probe
reads it back with `KVStats.from_json`, which takes a partial payload (missing keys read as zero).

Invariants:
- `ServerProbe.read()` never raises: a refused connection, a timeout, a 404 or bad JSON come
  back as `ServerReading(ok=False, error=...)`, and the monitor keeps going.
- Rates (block moves and bytes per second) are differences of the server's cumulative counters
  between two successful readings; the first reading has none. A counter that went down (the
  server restarted) gives no rate for that refresh.
- Short timeouts (default 0.5 s): a stuck server must not stall the view. stdlib only.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

from kvspill.monitor.snapshot import ServerReading, TierReading
from kvspill.stats import KVStats, KVTiers

_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+([0-9.eE+-]+|NaN)\s*$")


def _get(url: str, timeout_s: float, api_key: str | None = None) -> bytes:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (user-given URL)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
        return response.read()


def _describe(e: Exception) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"unreachable: {e.reason}"
    return f"{type(e).__name__}: {e}"


def _prometheus_queue(text: str) -> tuple[int | None, int | None]:
    """(running, waiting) from metrics named `<prefix>:...requests_running` / `..._waiting`, summed
    over their labels, from one prefix: kvspill's where there, since a kvspill server exports the
    same gauges under `vllm:` names too (counted twice otherwise)."""
    found: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        match = _METRIC.match(line.strip())
        if match is None:
            continue
        name, value = match.groups()
        for key in ("running", "waiting"):
            if name.endswith(f"requests_{key}") and value != "NaN":
                per_prefix = found.setdefault(name.split(":", 1)[0] if ":" in name else "", {})
                per_prefix[key] = per_prefix.get(key, 0) + int(float(value))
    chosen = found.get("kvspill") or next(iter(found.values()), {})
    return chosen.get("running"), chosen.get("waiting")


def _tiers(tiers: KVTiers) -> dict[str, TierReading]:
    return {
        name: TierReading(
            t.blocks, t.used_blocks, t.total_bytes, t.used_bytes, t.prefix_bytes, t.prefix_hit_rate
        )
        for name, t in tiers.items()
    }


class ServerProbe:
    """Reads one server each refresh and turns its cumulative counters into rates."""

    def __init__(self, url: str, timeout_s: float = 0.5, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.api_key = api_key  # the server's --api-key: every route but /health asks for it
        self._last: tuple[float, int, int] | None = None  # (time, block moves, bytes moved)

    def _rates(self, now: float, moves: int, moved: int) -> tuple[float | None, float | None]:
        last, self._last = self._last, (now, moves, moved)
        if last is None or now <= last[0] or moves < last[1] or moved < last[2]:
            return None, None
        dt = now - last[0]
        return (moves - last[1]) / dt, (moved - last[2]) / dt

    def _queue_from_metrics(self) -> tuple[int | None, int | None]:
        try:
            return _prometheus_queue(
                _get(self.url + "/metrics", self.timeout_s, self.api_key).decode("utf-8", "replace")
            )
        except Exception:  # /metrics is optional: /v1/kv already said what it could
            return None, None

    def read(self, now: float) -> ServerReading:
        try:
            kv = KVStats.from_json(json.loads(_get(self.url + "/v1/kv", self.timeout_s, self.api_key)))
        except Exception as e:  # every failure is reported in the view, none is fatal
            self._last = None
            return ServerReading(url=self.url, ok=False, error=f"/v1/kv {_describe(e)}")
        running: int | None
        waiting: int | None
        if kv.scheduler is not None:
            running, waiting = kv.scheduler.num_running, kv.scheduler.num_waiting
            moves = sum(kv.scheduler.kv_tiers.kv_block_moves.values())
        else:  # a server whose /v1/kv has no queue figures: /metrics may have them
            (running, waiting), moves = self._queue_from_metrics(), 0
        moved = kv.total_bytes_moved
        moves_per_s, bytes_per_s = self._rates(now, moves, moved)
        return ServerReading(
            url=self.url,
            ok=True,
            tiers=_tiers(kv.tiers),
            num_running=running,
            num_waiting=waiting,
            num_requests=len(kv.requests),
            block_moves_per_s=moves_per_s,
            bytes_moved_per_s=bytes_per_s,
            bytes_moved_total=moved,
        )
