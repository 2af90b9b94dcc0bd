"""The CPU engine's default dtype, chosen by measuring this CPU (`--dtype auto` on the CPU).

fp16 keeps 3 more mantissa bits than bf16 (SmolLM2's greedy output matched fp32's for 64 tokens
where bf16 drifted: docs/performance-history.md) and halves fp32's bytes, so decode (bound by reading the
weights) is faster where the CPU multiplies fp16 natively (AVX-512 FP16, or oneDNN's conversion
paths on AVX-512 hosts: 6.2 vs 10.7 ms a SmolLM2 token here). On an AVX2-only CPU one fp16 matmul
ran 3-5x slower than fp32 (a 512-token prefill: 22 s vs 9.4 s; issue 20). So: time a decode-shaped
GEMV and a prefill-shaped GEMM in fp16 and fp32 with the engine's threads, and take the dtype
that serves a typical request faster: `PROMPT_TOKENS` of prefill (GEMM time per token) and
`NEW_TOKENS` of decode (GEMV time per token); fp16 on a tie. Since an fp16 engine's prefill steps
run in fp32 (model/layers.cpu_widens; bench/results/2026-12-07-cpu-prefill-fp32/), both dtypes
pay fp32's GEMM and the GEMVs decide. bf16 is never picked by default (inexact).

The choice is cached per host (CPU model, torch's CPU capability, torch version, threads) in
`cpu_dtype.json` beside the calibration file, so only the first start pays the ~0.5 s.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from kvspill.env import env_settings
from kvspill.plan.host_rates import cpu_model_name

log = logging.getLogger(__name__)

PROMPT_TOKENS, NEW_TOKENS = 512, 128  # the typical request the choice is made for
GEMV_SHAPE = (1, 2048, 8192)  # tokens, in, out: a decode step's projection (32 MiB in fp16)
GEMM_SHAPE = (128, 2048, 2048)  # a prefill chunk's projection


def _host_key() -> str:
    import torch

    model = cpu_model_name()
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{model}|{capability}|torch {torch.__version__}|threads {torch.get_num_threads()}"


def _cache_path() -> Path:
    return env_settings().calibration_path.parent / "cpu_dtype.json"


def measure_matmul_seconds(dtype_name: str, repeats: int = 3) -> tuple[float, float]:
    """Best seconds of the GEMV and the GEMM shapes in `dtype_name` on the CPU."""
    import torch

    dtype = getattr(torch, dtype_name)
    times = []
    for tokens, k, n in (GEMV_SHAPE, GEMM_SHAPE):
        x = torch.randn(tokens, k).to(dtype)
        w = torch.randn(n, k).to(dtype) * 0.02
        torch.nn.functional.linear(x, w)  # warm-up (oneDNN picks its kernel)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - start)
        times.append(best)
    return times[0], times[1]


def request_seconds(gemv_s: float, gemm_s: float) -> float:
    """Matmul time of a PROMPT_TOKENS + NEW_TOKENS request from the two shapes' times."""
    return gemm_s * PROMPT_TOKENS / GEMM_SHAPE[0] + gemv_s * NEW_TOKENS


def choose(fp16: tuple[float, float], fp32: tuple[float, float]) -> str:
    """The dtype whose (gemv, gemm) seconds serve the typical request faster (fp16 on a tie). An
    fp16 engine's prefill runs in fp32 (model/layers.cpu_widens), so both pay fp32's GEMM."""
    as_fp16 = request_seconds(fp16[0], fp32[1])
    return "float16" if as_fp16 <= request_seconds(*fp32) else "float32"


def pick_cpu_dtype(cache: Path | None = None) -> str:
    """ "float16" or "float32" for this host: cached, else measured (and cached)."""
    path = cache or _cache_path()
    key = _host_key()
    records: dict[str, dict] = {}  # one record per host key (thread counts differ between runs)
    try:
        loaded = json.loads(path.read_text())
        records = {k: v for k, v in loaded.items() if isinstance(v, dict)}
        saved = records.get(key, {})
        if saved.get("dtype") in ("float16", "float32"):
            return str(saved["dtype"])
    except (OSError, ValueError, AttributeError):
        pass  # no cache yet, or an unreadable one: measure
    fp16, fp32 = measure_matmul_seconds("float16"), measure_matmul_seconds("float32")
    dtype = choose(fp16, fp32)
    log.info(
        "CPU dtype %s: fp16 GEMV %.2f ms / GEMM %.2f ms, fp32 %.2f / %.2f ms (cached in %s)",
        dtype, fp16[0] * 1e3, fp16[1] * 1e3, fp32[0] * 1e3, fp32[1] * 1e3, path,
    )  # fmt: skip
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        records[key] = {"dtype": dtype, "fp16_s": fp16, "fp32_s": fp32}
        path.write_text(json.dumps(records, indent=1))
    except OSError as e:  # a read-only home: measure again next start
        log.warning("Cannot cache the CPU dtype choice in %s: %s", path, e)
    return dtype
