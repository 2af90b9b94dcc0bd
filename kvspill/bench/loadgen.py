"""An async load client for an OpenAI-compatible server: the engine of `kvspill bench serve`.

Sends `num_requests` streaming `/v1/completions` requests, at most `concurrency` at a time, each
with a prompt of exactly `prompt_len` random token ids and `max_tokens` output tokens forced by
`min_tokens` and `ignore_eos` (both accepted by kvspill's server; other servers ignore unknown
fields). Measures per request TTFT (first content chunk), ITL (gaps between content chunks),
end-to-end latency and output tokens (from the `include_usage` chunk), and aggregates them.

Invariants:
- A failed request (HTTP status, error event, broken stream, refused connection) is counted by
  kind in `errors` and never raises: `run_load` returns a report for any server, or none.
- Latencies are in milliseconds; percentiles use linear interpolation; ITL pools the gaps of all
  successful requests.
- `httpx` is imported lazily, so importing this module (or `kvspill`) stays light.
- `on_progress`, when given, is called after every finished request (ok or not) with a
  `LoadProgress`: requests done of all, errors, output tokens so far and seconds since the first
  request went out (`bench serve`'s live line); it runs on the event loop, so it must be quick.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

FIRST_TOKEN_ID = 5  # skip the low ids that are often bos/eos/pad


@dataclass
class LoadConfig:
    url: str
    concurrency: int = 1
    num_requests: int | None = None
    prompt_len: int = 128
    max_tokens: int = 128
    model: str | None = None
    api_key: str | None = None
    seed: int = 0
    max_token_id: int = 255
    timeout_s: float = 300.0
    json_schema: dict[str, Any] | None = None  # sent as guided_json: every token under a grammar

    @property
    def total_requests(self) -> int:
        return self.num_requests if self.num_requests is not None else 4 * self.concurrency


@dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    ttft_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    e2e_ms: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0


@dataclass(frozen=True)
class LoadProgress:
    num_done: int
    num_total: int
    num_errors: int
    output_tokens: int
    elapsed_s: float

    def line(self) -> str:
        """`requests 12/40 (0 errors), 523.1 tok/s, 8.2 s`: output tok/s over the time so far."""
        rate = self.output_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return (
            f"requests {self.num_done}/{self.num_total} ({self.num_errors} errors), "
            f"{rate:.1f} tok/s, {self.elapsed_s:.1f} s"
        )


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation; None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def make_prompts(cfg: LoadConfig) -> list[list[int]]:
    """`total_requests` prompts of exactly `prompt_len` token ids, reproducible from `seed`."""
    rng = random.Random(cfg.seed)
    hi = max(cfg.max_token_id, FIRST_TOKEN_ID)
    return [
        [rng.randint(FIRST_TOKEN_ID, hi) for _ in range(cfg.prompt_len)] for _ in range(cfg.total_requests)
    ]


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def resolve_model(client: Any, cfg: LoadConfig) -> tuple[str | None, str | None]:
    """(model, problem): `cfg.model`, else the first id from `/v1/models`; problem says why not."""
    if cfg.model:
        return cfg.model, None
    try:
        resp = await client.get(cfg.url.rstrip("/") + "/v1/models", headers=_headers(cfg.api_key))
        if resp.status_code != 200:
            return None, f"/v1/models answered HTTP {resp.status_code}"
        data = resp.json().get("data") or []
        return (str(data[0]["id"]), None) if data else (None, "/v1/models listed no model")
    except Exception as e:  # noqa: BLE001 - reported, the run goes on and counts the errors
        return None, f"/v1/models failed: {type(e).__name__}: {e}"


def request_body(cfg: LoadConfig, model: str | None, prompt: list[int]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": cfg.max_tokens,
        "min_tokens": cfg.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.json_schema is not None:
        # Guided decoding ends on the grammar's stop token, so it refuses min_tokens and ignore_eos:
        # give a schema whose shortest answer is longer than max_tokens to keep lengths equal.
        del body["min_tokens"], body["ignore_eos"]
        body["guided_json"] = cfg.json_schema
    if model:
        body["model"] = model
    return body


def _error_kind(exc: BaseException) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, json.JSONDecodeError):
        return "bad_json"
    return type(exc).__name__


def _handle_event(
    obj: dict[str, Any], res: RequestResult, now: float, start: float, last: list[float]
) -> None:
    """Fold one SSE JSON event into `res`; `last` holds the previous content chunk's time."""
    if "error" in obj:
        err = obj["error"] if isinstance(obj["error"], dict) else {}
        res.error = f"stream_{err.get('type') or 'error'}"
        return
    if obj.get("choices"):
        if res.ttft_ms is None:
            res.ttft_ms = (now - start) * 1e3
        else:
            res.itl_ms.append((now - last[0]) * 1e3)
        last[0] = now
    usage = obj.get("usage")
    if usage:
        res.output_tokens = int(usage.get("completion_tokens") or 0)
        res.prompt_tokens = int(usage.get("prompt_tokens") or 0)


async def _read_stream(resp: Any, res: RequestResult, start: float) -> bool:
    """Read SSE lines until `[DONE]` (True) or the stream ends or fails (False)."""
    last = [start]
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue  # blank separators and `: ping` comments
        payload = line[5:].strip()
        if payload == "[DONE]":
            return True
        _handle_event(json.loads(payload), res, time.perf_counter(), start, last)
        if res.error:
            return False
    return False


async def send_one(client: Any, cfg: LoadConfig, body: dict[str, Any]) -> RequestResult:
    """One streaming completion; never raises."""
    res = RequestResult()
    start = time.perf_counter()
    try:
        url = cfg.url.rstrip("/") + "/v1/completions"
        async with client.stream("POST", url, json=body, headers=_headers(cfg.api_key)) as resp:
            if resp.status_code != 200:
                await resp.aread()
                res.error = f"http_{resp.status_code}"
                return res
            done = await _read_stream(resp, res, start)
        if res.error is None and not done:
            res.error = "incomplete_stream"
        elif res.error is None and res.ttft_ms is None:
            res.error = "no_output"
    except Exception as e:  # noqa: BLE001 - every failure is a counted error kind
        res.error = _error_kind(e)
    res.e2e_ms = (time.perf_counter() - start) * 1e3
    res.ok = res.error is None
    return res


async def run_load(
    cfg: LoadConfig, on_progress: Callable[[LoadProgress], None] | None = None
) -> dict[str, Any]:
    """Run the whole load and return the summary (see `summarize`)."""
    import httpx

    prompts = make_prompts(cfg)
    limits = httpx.Limits(max_connections=cfg.concurrency, max_keepalive_connections=cfg.concurrency)
    async with httpx.AsyncClient(timeout=cfg.timeout_s, limits=limits) as client:
        model, problem = await resolve_model(client, cfg)
        sem = asyncio.Semaphore(cfg.concurrency)
        tally = Counter[str]()

        async def bounded(prompt: list[int]) -> RequestResult:
            async with sem:
                result = await send_one(client, cfg, request_body(cfg, model, prompt))
            tally.update(done=1, errors=int(not result.ok), tokens=result.output_tokens)
            if on_progress is not None:
                elapsed = time.perf_counter() - t0
                on_progress(
                    LoadProgress(tally["done"], len(prompts), tally["errors"], tally["tokens"], elapsed)
                )
            return result

        t0 = time.perf_counter()
        results = await asyncio.gather(*(bounded(p) for p in prompts))
        wall = time.perf_counter() - t0
    summary = summarize(list(results), wall)
    summary["config"] = {k: v for k, v in asdict(cfg).items() if k != "api_key"}
    summary["config"]["num_requests"] = cfg.total_requests
    summary["model"] = model
    if problem:
        summary["warnings"] = [problem]
    return summary


def latency_stats(values: list[float]) -> dict[str, float | None]:
    """mean, p50, p90, p99 of `values` (None each for no values)."""
    mean = sum(values) / len(values) if values else None
    return {
        "mean": mean,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


def summarize(results: list[RequestResult], wall_s: float) -> dict[str, Any]:
    """Aggregate per-request results: percentiles in ms, throughputs over the wall time."""
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    wall = max(wall_s, 1e-9)
    return {
        "requests": len(results),
        "successes": len(ok),
        "errors": len(results) - len(ok),
        "error_kinds": dict(Counter(r.error for r in results if r.error)),
        "wall_s": wall_s,
        "request_throughput": len(ok) / wall,
        "output_tokens": out_tokens,
        "output_tokens_per_request": [r.output_tokens for r in ok],
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "output_tokens_per_s": out_tokens / wall,
        "ttft_ms": latency_stats([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        "itl_ms": latency_stats([gap for r in ok for gap in r.itl_ms]),
        "e2e_ms": latency_stats([r.e2e_ms for r in ok if r.e2e_ms is not None]),
    }


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def format_table(summary: dict[str, Any]) -> str:
    """A plain-text table of the summary."""
    lines = [
        f"requests {summary['requests']}  ok {summary['successes']}  errors {summary['errors']}  "
        f"wall {summary['wall_s']:.2f}s  model {summary.get('model') or '-'}",
        f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        s = summary[name]
        lines.append(
            f"{name:<10}{_fmt(s['mean']):>10}{_fmt(s['p50']):>10}{_fmt(s['p90']):>10}{_fmt(s['p99']):>10}"
        )
    lines.append(
        f"request throughput {summary['request_throughput']:.2f} req/s, "
        f"output {summary['output_tokens_per_s']:.1f} tok/s ({summary['output_tokens']} tokens)"
    )
    for kind, n in sorted(summary["error_kinds"].items()):
        lines.append(f"error {kind}: {n}")
    for w in summary.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)
