"""A running kvspill server as a suite `Target`: requests through `kvspill.bench.loadgen`, memory from
`/metrics`, KV bytes moved from `/v1/kv`.

Invariants:
- Requests are loadgen's streaming `/v1/completions` (same prompts, same error kinds); the
  results map TTFT and inter-token gaps to seconds and decode tok/s.
- Memory comes from the server's gauges `kvspill:host_rss_bytes` and `kvspill:gpu_memory_used_bytes`
  (memory allocated now, 0 on a CPU server). The server exposes no peak, so `peak_gpu_gib` is the
  largest value seen by polling `/metrics` every `poll_s` while requests run: a lower bound.
- A server that cannot be read gives None figures, never an exception; a refused request is a
  failed `RunResult`.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import Sequence
from typing import Any

from kvspill.bench.suites.targets import (
    DEFAULT_MAX_TOKEN_ID,
    GIB,
    Reading,
    RequestSpec,
    RunResult,
    decode_rate,
    prompt_ids,
)
from kvspill.stats import KVStats

_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$")
RSS_METRIC = "kvspill:host_rss_bytes"
GPU_METRIC = "kvspill:gpu_memory_used_bytes"


def parse_metrics(text: str) -> dict[str, float]:
    """Unlabelled sums of a Prometheus text page: name -> value (labels of one name are added)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = _METRIC.match(line.strip())
        if match:
            values[match.group(1)] = values.get(match.group(1), 0.0) + float(match.group(2))
    return values


class UrlTarget:
    """A server at `url`. `close()` does nothing: the server is not ours to stop."""

    def __init__(
        self,
        url: str,
        label: str = "server",
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_token_id: int = DEFAULT_MAX_TOKEN_ID,
        poll_s: float = 0.25,
    ) -> None:
        self.url = url.rstrip("/")
        self.label = label
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_token_id = max_token_id
        self.poll_s = poll_s
        self._peak_gpu: float | None = None
        self.max_model_len = self._models_max_len()

    def _get(self, path: str, timeout_s: float = 2.0) -> bytes:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        request = urllib.request.Request(self.url + path, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (user-given URL)
            return response.read()

    def _models_max_len(self) -> int | None:
        try:
            data = json.loads(self._get("/v1/models")).get("data") or []
            if self.model is None and data:
                self.model = str(data[0]["id"])
            value = data[0].get("max_model_len") if data else None
            return int(value) if value else None
        except Exception:  # noqa: BLE001 - a server that cannot say: contexts go unchecked, requests report
            return None

    def info(self) -> dict[str, Any]:
        return {
            "target": "url",
            "url": self.url,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "card": "server",
        }

    def _memory(self) -> tuple[float | None, float | None]:
        """(host RSS GiB, GPU GiB now) from /metrics; None where the server does not say."""
        try:
            values = parse_metrics(self._get("/metrics").decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - memory is optional, requests are what counts
            return None, None
        rss, gpu = values.get(RSS_METRIC), values.get(GPU_METRIC)
        return (None if rss is None else round(rss / GIB, 4)), (None if gpu is None else round(gpu / GIB, 4))

    def read(self) -> Reading:
        rss, gpu = self._memory()
        if gpu is not None:
            self._peak_gpu = max(self._peak_gpu or 0.0, gpu)
        moved: dict[str, int] = {}
        try:
            moved = dict(KVStats.from_json(json.loads(self._get("/v1/kv"))).bytes_moved)
        except Exception:  # noqa: BLE001 - a server without /v1/kv moves no bytes we can count
            pass
        return Reading(host_rss_gib=rss, gpu_gib=gpu, peak_gpu_gib=self._peak_gpu, bytes_moved=moved)

    def reset_peak(self) -> None:
        self._peak_gpu = None

    def close(self) -> None:
        pass

    def run(self, specs: Sequence[RequestSpec]) -> list[RunResult]:
        if not specs:
            raise ValueError("run() needs at least one request")
        return asyncio.run(self._run(list(specs)))

    async def _run(self, specs: list[RequestSpec]) -> list[RunResult]:
        import httpx

        from kvspill.bench.loadgen import LoadConfig, request_body, send_one

        limits = httpx.Limits(max_connections=len(specs) + 1)
        async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits) as client:
            done = asyncio.Event()
            poller = asyncio.create_task(self._poll(done))
            jobs = []
            for spec in specs:
                cfg = LoadConfig(
                    url=self.url,
                    prompt_len=spec.prompt_len,
                    max_tokens=spec.new_tokens,
                    model=self.model,
                    api_key=self.api_key,
                    seed=spec.seed,
                    max_token_id=self.max_token_id,
                    timeout_s=self.timeout_s,
                )
                body = request_body(cfg, self.model, prompt_ids(spec, self.max_token_id))
                jobs.append(send_one(client, cfg, body))
            try:
                raw = await asyncio.gather(*jobs)
            finally:
                done.set()
                await poller
        return [_to_result(r, spec) for r, spec in zip(raw, specs, strict=True)]

    async def _poll(self, done: asyncio.Event) -> None:
        """Sample /metrics until the requests are done: the largest GPU figure is the peak we report."""
        while not done.is_set():
            _, gpu = await asyncio.to_thread(self._memory)
            if gpu is not None:
                self._peak_gpu = max(self._peak_gpu or 0.0, gpu)
            try:
                await asyncio.wait_for(done.wait(), self.poll_s)
            except TimeoutError:
                pass


def _to_result(res: Any, spec: RequestSpec) -> RunResult:
    """loadgen's RequestResult (milliseconds) as a RunResult (seconds)."""
    ttft = None if res.ttft_ms is None else res.ttft_ms / 1e3
    e2e = None if res.e2e_ms is None else res.e2e_ms / 1e3
    if not res.ok:
        return RunResult(ok=False, err=res.error, ttft_s=ttft, new_tokens=res.output_tokens, e2e_s=e2e)
    if res.output_tokens < spec.new_tokens:
        return RunResult(
            ok=False,
            err=f"{res.output_tokens} of {spec.new_tokens} tokens",
            ttft_s=ttft,
            new_tokens=res.output_tokens,
            e2e_s=e2e,
        )
    # Chunks may carry several tokens: tokens after the first over the first-to-last-chunk time.
    rate = decode_rate(res.output_tokens, sum(res.itl_ms) / 1e3)
    return RunResult(ok=True, ttft_s=ttft, decode_tok_s=rate, new_tokens=res.output_tokens, e2e_s=e2e)
