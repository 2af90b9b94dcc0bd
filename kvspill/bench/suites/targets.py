"""What a suite drives: a `Target` that runs requests and reports memory, and the in-process one.

A request is `RequestSpec(prompt_len, new_tokens, seed)`: a prompt of exactly `prompt_len`
random token ids (the same ids `kvspill.bench.loadgen` sends for that seed) and exactly `new_tokens`
output tokens (EOS ignored). `Target.run(specs)` puts all of them in flight at once and returns
one `RunResult` each; `Target.read()` returns memory now and the cumulative KV bytes moved.

Invariants:
- `run` never raises for a failed request: the result says `ok=False` and why (`err`). It raises
  only for misuse (an empty list).
- TTFT counts from the moment the requests were handed to the target; decode tok/s is the
  request's tokens after the first over the time from its first to its last token (None for one token).
- Memory figures are GiB (2**30). GPU figures are None off CUDA; `peak_gpu_gib` is the peak since
  `reset_peak()`.
- `EngineTarget` runs the engine in this thread; several specs are several requests in the engine
  at once (continuous batching), not threads.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvspill.errors import KVCacheBusyError, KvspillError

GIB = 2**30
DEFAULT_MAX_TOKEN_ID = 255  # as `kvspill bench serve`: ids every tokenizer has, past the specials


@dataclass(frozen=True)
class RequestSpec:
    prompt_len: int
    new_tokens: int
    seed: int = 0


@dataclass
class RunResult:
    ok: bool
    err: str | None = None
    ttft_s: float | None = None
    decode_tok_s: float | None = None
    new_tokens: int = 0  # output tokens actually received
    e2e_s: float | None = None


@dataclass
class Reading:
    host_rss_gib: float | None = None  # the engine's process (the server's, for a URL)
    gpu_gib: float | None = None  # allocated now
    peak_gpu_gib: float | None = None  # since reset_peak()
    bytes_moved: dict[str, int] = field(default_factory=dict)  # cumulative, per direction (gpu_to_cpu, ...)


class Target(Protocol):
    label: str

    @property
    def max_model_len(self) -> int | None:
        """None: unknown (a server that does not say). Read-only: an engine's is always known."""
        ...

    def info(self) -> dict[str, Any]:
        """What the report says about the target: model, device or URL, card."""
        ...

    def run(self, specs: Sequence[RequestSpec]) -> list[RunResult]: ...

    def read(self) -> Reading: ...

    def reset_peak(self) -> None: ...

    def close(self) -> None: ...


def prompt_ids(spec: RequestSpec, max_token_id: int) -> list[int]:
    """The prompt `kvspill.bench.loadgen` would send for this spec (same seed, same ids)."""
    from kvspill.bench.loadgen import LoadConfig, make_prompts

    cfg = LoadConfig(
        url="", num_requests=1, prompt_len=spec.prompt_len, seed=spec.seed, max_token_id=max_token_id
    )
    return make_prompts(cfg)[0]


def decode_rate(num_tokens: int, span_s: float) -> float | None:
    """Tokens after the first over the time from the first to the last; None when undefined."""
    if num_tokens < 2 or span_s <= 0:
        return None
    return (num_tokens - 1) / span_s


def _gib(num_bytes: float | None) -> float | None:
    return None if num_bytes is None else round(num_bytes / GIB, 4)


def process_rss_gib() -> float | None:
    try:
        import psutil

        return _gib(psutil.Process(os.getpid()).memory_info().rss)
    except (ImportError, OSError):
        return None


@dataclass
class _Pending:
    index: int
    start: float
    token_times: list[float] = field(default_factory=list)


class EngineTarget:
    """An `LLMEngine` in this process. `close()` frees it (and the CUDA cache) for the next one."""

    def __init__(self, engine: Any, label: str = "engine", max_token_id: int = DEFAULT_MAX_TOKEN_ID) -> None:
        self.engine = engine
        self.label = label
        self.max_model_len = int(engine.max_model_len)
        self.max_token_id = min(max_token_id, engine.vocab_size - 1)
        self._cuda = engine.bundle.device.type == "cuda"
        self.load_s: float | None = None  # seconds `build` took to start the engine (None: given one)

    @classmethod
    def build(
        cls, config: Any, label: str = "engine", max_token_id: int = DEFAULT_MAX_TOKEN_ID
    ) -> EngineTarget:
        """The engine of `config`, timed: its load time is the report's `load_s`."""
        from kvspill.engine.core import LLMEngine

        started = time.perf_counter()
        engine = LLMEngine(config)
        target = cls(engine, label, max_token_id)
        target.load_s = round(time.perf_counter() - started, 3)
        return target

    def info(self) -> dict[str, Any]:
        import torch

        device = self.engine.bundle.device
        card = torch.cuda.get_device_name(device) if self._cuda else "cpu"
        storage = self.engine.bundle.storage
        return {
            "target": "in-process",
            "model": self.engine.config.model or "embedded SmolLM2-135M-Instruct",
            "device": str(device),
            "card": card,
            "max_model_len": self.max_model_len,
            "load_s": self.load_s,
            "kv_blocks": {
                "gpu": storage.num_blocks,
                "cpu": storage.num_cpu_blocks,
                "disk": storage.num_disk_blocks,
            },
        }

    def _add(self, spec: RequestSpec) -> str:
        from kvspill.sampling_params import SamplingParams

        params = SamplingParams(
            temperature=0.0,
            max_tokens=spec.new_tokens,
            min_tokens=spec.new_tokens,
            ignore_eos=True,
            detokenize=False,
        )
        try:
            # The server's rule for a request that can never fit the tiers (a clear error) ...
            self.engine.check_admission(spec.prompt_len, params)
        except KVCacheBusyError:
            pass  # ... but no room *now* just queues, as offline `generate` does
        return self.engine.add_request(prompt_ids(spec, self.max_token_id), params)

    def run(self, specs: Sequence[RequestSpec]) -> list[RunResult]:
        if not specs:
            raise ValueError("run() needs at least one request")
        results: list[RunResult | None] = [None] * len(specs)
        pending: dict[str, _Pending] = {}
        start = time.perf_counter()
        for i, spec in enumerate(specs):
            try:
                pending[self._add(spec)] = _Pending(i, start)
            except KvspillError as e:
                results[i] = RunResult(ok=False, err=f"{type(e).__name__}: {e}")
        steps = self.engine.run()
        while pending:
            try:
                step = next(steps, None)
            except Exception as e:  # noqa: BLE001 - an OOM or a kernel error is a result of the run
                self._fail_all(pending, results, f"{type(e).__name__}: {str(e)[:300]}")
                break
            if step is None:
                break
            now = time.perf_counter()
            for out in step.outputs:
                p = pending.get(out.req_id)
                if p is None:
                    continue
                p.token_times.extend([now] * len(out.delta_token_ids))
                if out.finished:
                    results[p.index] = _finished(p, out, specs[p.index], now)
                    del pending[out.req_id]
        self._fail_all(pending, results, "the engine stopped before the request finished")
        return [r if r is not None else RunResult(ok=False, err="no result") for r in results]

    def _fail_all(self, pending: dict[str, _Pending], results: list[RunResult | None], err: str) -> None:
        for req_id, p in list(pending.items()):
            self.engine.abort_request(req_id)
            results[p.index] = RunResult(ok=False, err=err, new_tokens=len(p.token_times))
            del pending[req_id]

    def read(self) -> Reading:
        gpu = peak = None
        if self._cuda:
            import torch

            device = self.engine.bundle.device
            gpu = _gib(torch.cuda.memory_allocated(device))
            peak = _gib(torch.cuda.max_memory_allocated(device))
        moved = dict(self.engine.kv_stats().bytes_moved)
        return Reading(host_rss_gib=process_rss_gib(), gpu_gib=gpu, peak_gpu_gib=peak, bytes_moved=moved)

    def reset_peak(self) -> None:
        if self._cuda:
            import torch

            torch.cuda.synchronize(self.engine.bundle.device)
            torch.cuda.reset_peak_memory_stats(self.engine.bundle.device)

    def close(self) -> None:
        cuda = self._cuda
        cold = getattr(self.engine.runner, "cold", None)
        if cold is not None:
            cold.close()  # its worker threads: nothing else in the engine stops them
        del self.engine
        gc.collect()  # the KV pools are large tensors held in reference cycles of the runner
        if cuda:
            import torch

            torch.cuda.empty_cache()


def _finished(p: _Pending, out: Any, spec: RequestSpec, now: float) -> RunResult:
    n = len(p.token_times)
    ttft = p.token_times[0] - p.start if n else None
    span = p.token_times[-1] - p.token_times[0] if n else 0.0
    if out.error or out.finish_reason in ("error", "abort"):
        return RunResult(
            ok=False, err=out.error or f"finish_reason={out.finish_reason}", ttft_s=ttft, new_tokens=n
        )
    if n < spec.new_tokens:
        return RunResult(
            ok=False,
            err=f"{n} of {spec.new_tokens} tokens (finish_reason={out.finish_reason})",
            ttft_s=ttft,
            new_tokens=n,
        )
    return RunResult(
        ok=True, ttft_s=ttft, decode_tok_s=decode_rate(n, span), new_tokens=n, e2e_s=now - p.start
    )


WARMUP_SPEC = RequestSpec(prompt_len=16, new_tokens=2, seed=-1)


def warm_up(target: Target) -> str | None:
    """One short request that is no row, so the first measured one does not pay for lazy
    initialisation (kernels, allocator growth); its error, if any (the rows will say it again)."""
    result = target.run([WARMUP_SPEC])[0]
    return None if result.ok else result.err


def measure(target: Target, spec: RequestSpec) -> dict[str, Any]:
    """One request alone on `target`: the row every context-sweeping suite writes.

    `bytes_moved` is the difference of the target's cumulative counters around the request
    (a server shared with other clients counts theirs too)."""
    target.reset_peak()
    before = target.read()
    result = target.run([spec])[0]
    after = target.read()
    moved = {k: v - before.bytes_moved.get(k, 0) for k, v in after.bytes_moved.items()}
    row: dict[str, Any] = {
        "ctx": spec.prompt_len,
        "new_tokens": result.new_tokens,
        "ok": result.ok,
        "err": result.err,
        "ttft_s": round_or_none(result.ttft_s),
        "decode_tok_s": round_or_none(result.decode_tok_s, 2),
        "e2e_s": round_or_none(result.e2e_s),
        "peak_gpu_gib": after.peak_gpu_gib,
        "host_rss_gib": after.host_rss_gib,
        "bytes_moved": sum(moved.values()),
    }
    row.update({f"bytes_{k}": v for k, v in sorted(moved.items())})
    return row


def round_or_none(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
