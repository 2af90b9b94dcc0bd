"""Abusive requests for `bench stability --abuse N` against a server (`--url`): each wave sends N
of them beside its normal requests, drawn in turn from the kinds below, and checks each answer.

Kinds and what a healthy server answers:
- `aborted`: a stream of 200 tokens the client closes after its first event (no answer to check:
  the server must free it; the RSS trend and later waves show whether it did);
- `oversized`: a body of `oversize_bytes` (past any sensible --max-request-bytes): 413;
- `surrogate`, `bad_utf8`, `bad_json`, `deep_json`, `wrong_type`, `too_many_stops`: 400;
- `no_route`: 404; `wrong_method`: 405.

Invariant: an answer counts as an error when it is a 5xx, a status other than the expected one,
or no answer at all (connection refused or reset: the server crashed or cut the client off).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

OVERSIZE_BYTES = 32 << 20
_JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class AbuseOutcome:
    kind: str
    status: int | None  # None: no answer (connection error)
    expected: int | None  # None: any 2xx (aborted streams)
    err: str | None

    @property
    def ok(self) -> bool:
        return self.err is None


def _requests(model: str | None, oversize_bytes: int) -> dict[str, tuple[int | None, dict[str, Any]]]:
    """kind -> (expected status, httpx.request kwargs)."""
    base = {"model": model} if model else {}
    deep = b'{"prompt": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    return {
        "oversized": (413, {"method": "POST", "url": "/v1/completions", "content": b"a" * oversize_bytes}),
        "surrogate": (400, {"method": "POST", "url": "/v1/completions", "content": b'{"prompt": "\\ud800"}'}),
        "bad_utf8": (400, {"method": "POST", "url": "/tokenize", "content": b'{"prompt": "caf\xe9"}'}),
        "bad_json": (400, {"method": "POST", "url": "/v1/chat/completions", "content": b'{"messages": [}'}),
        "deep_json": (400, {"method": "POST", "url": "/v1/completions", "content": deep}),
        "wrong_type": (
            400,
            {"method": "POST", "url": "/v1/completions", "json": {**base, "prompt": {"a": 1}}},
        ),
        "too_many_stops": (
            400,
            {
                "method": "POST",
                "url": "/v1/completions",
                "json": {**base, "prompt": "a", "stop": ["x"] * 1000},
            },
        ),
        "no_route": (404, {"method": "GET", "url": "/v1/nothing"}),
        "wrong_method": (405, {"method": "DELETE", "url": "/v1/completions"}),
    }


class AbuseMix:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        model: str | None = None,
        oversize_bytes: int = OVERSIZE_BYTES,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=120)
        self._model = model
        self._requests = _requests(model, oversize_bytes)
        self._kinds: Iterator[str] = itertools.cycle(["aborted", *self._requests])
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="abuse")

    def send(self, count: int) -> list[AbuseOutcome]:
        """`count` abusive requests at once (the next kinds in turn); their outcomes."""
        kinds = [next(self._kinds) for _ in range(count)]
        return list(self._pool.map(self._one, kinds))

    def _one(self, kind: str) -> AbuseOutcome:
        try:
            if kind == "aborted":
                return self._aborted()
            expected, kwargs = self._requests[kind]
            if "content" in kwargs:
                kwargs = {**kwargs, "headers": _JSON}
            status = self._client.request(**kwargs).status_code
        except httpx.HTTPError as e:
            return AbuseOutcome(kind, None, None, f"{kind}: no answer: {type(e).__name__}: {e}")
        err = None if status == expected else f"{kind}: HTTP {status}, expected {expected}"
        return AbuseOutcome(kind, status, expected, err)

    def _aborted(self) -> AbuseOutcome:
        body = {"prompt": "tell me a story", "max_tokens": 200, "ignore_eos": True, "stream": True}
        if self._model:
            body["model"] = self._model
        with self._client.stream("POST", "/v1/completions", json=body) as r:
            status = r.status_code
            if status == 200:
                next(r.iter_lines(), None)  # the first event, then the client goes away
        ok = 200 <= status < 300 or status == 503  # 503 + Retry-After: a full queue, a fine answer
        return AbuseOutcome("aborted", status, None, None if ok else f"aborted: HTTP {status}")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()
