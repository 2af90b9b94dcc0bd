"""The CPU engine's rates, timed on this host in a second or two: what the plan of an engine on
the CPU divides by (`plan/costs.py` cpu_decode_floor, cpu_prefill_seconds).

At the dtype the engine picks here (`plan/cpu_dtype.py`), with torch's threads:
- `cpu_gemv_gbs`: weight bytes per second a decode step's projections read, a GEMV over a set of
  weights larger than the caches (as a model's weights are);
- `cpu_gemm_tflops`: a prefill chunk's projection (128 tokens, in the dtype the engine computes
  it in: fp32 over fp16 weights, `model/layers.cpu_widens`);
- `cpu_layer_s`: the fixed time of one decoder layer of a decode step: the engine runs its ops
  eagerly, one dispatch each, so a layer of tiny ops is timed and scaled to the engine's;
- `cpu_kv_gbs`: KV bytes a decode step's attention reads per second, from the RAM read rate.

`python -m kvspill.hardware.cpu_rates` measures and caches them where the planner reads them
(`plan/host_rates.py`): the planner runs it as a child process at first use, so its own process
stays torch-free. `kvspill doctor --calibrate` measures the same into the calibration.

Invariants: each figure is the best of a few repeats after a warm-up; the whole takes under
about two seconds on a two-core host.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import torch

from kvspill.model.layers import cpu_wide_dtype, dense_linear
from kvspill.plan.cpu_dtype import pick_cpu_dtype
from kvspill.plan.host_rates import cpu_host_key, save_cpu_rates

MiB = 1 << 20
GEMV_SHAPE = (2048, 2048)  # [out, in] of one weight (8 MiB in fp16)
GEMV_SET_BYTES = 192 * MiB  # weights cycled through per pass: past any L3, as a model's are
GEMM_TOKENS = 128  # a prefill chunk's rows, as plan/cpu_dtype.GEMM_SHAPE
# One decoder layer of the engine's decode step, eager on the CPU, is this many times the tiny
# op sequence `_tiny_layer` times (the engine's layer runs more ops: views, its projections'
# wrappers, its attention's metadata). Fit on the development host (2-core AMD EPYC, torch 2.13,
# fp16 activations over the embedded SmolLM2-135M's GGUF blocks, its norms, RoPE and K/V store in
# C++): decode 47.1-48.0 tok/s at 1K tokens of context, 28.0-28.8 at 8K, tiny layer 0.119 ms: (20.9
# ms - 2.0 ms of KV - 6.1 ms of weights at the plan's rate) / 30 layers = 0.43 ms a layer
# (bench/results/2026-12-08-cpu-decode-ops/; 4.0 before the C++ ops, 2026-12-02-cpu-plan-truth/).
ENGINE_LAYER_VS_TINY = 3.6
# The engine's decode attention over its host pool (runner/host_decode.py, the C++ kernel) reads
# KV at this share of the RAM read rate (a torch sum): the same host's decode took 13.9-14.5 ms
# more at 8K tokens than at 1K for 165 MB more KV, 11.6 GB/s, where the RAM read rate measured
# 28.9 GB/s (bench/results/2026-12-08-cpu-decode-ops/; 0.27 before the kernel read a sequence's
# partial last block itself, 2026-12-07-cpu-decode-tail/).
KV_READ_SHARE = 0.40
READ_BYTES = 256 * MiB


def _best(fn: Callable[[], object], repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def gemv_gbs(dtype: torch.dtype) -> float:
    """Weight bytes per second of one-token projections over weights that do not fit a cache."""
    out_features, in_features = GEMV_SHAPE
    count = max(1, GEMV_SET_BYTES // (out_features * in_features * torch.finfo(dtype).bits // 8))
    # constant values: filling is quick, and a matmul's time does not depend on them (no denormals)
    weights = [torch.full((out_features, in_features), 0.02, dtype=dtype) for _ in range(count)]
    x = torch.randn(1, in_features).to(dtype)  # [num_tokens, hidden]

    def one_pass() -> None:
        for w in weights:
            torch.nn.functional.linear(x, w)

    return sum(w.nbytes for w in weights) / _best(one_pass, 3) / 1e9


def gemm_tflops(dtype: torch.dtype) -> float:
    """A prefill chunk's projection over `dtype` weights: [GEMM_TOKENS, in] x [in, out], 2 FLOPs a
    multiply-add, as the engine runs it (fp16 weights: widened for the call, x in fp32)."""
    out_features, in_features = GEMV_SHAPE
    x = torch.randn(GEMM_TOKENS, in_features).to(cpu_wide_dtype(dtype))
    w = torch.randn(out_features, in_features).to(dtype) * 0.02
    seconds = _best(lambda: dense_linear(x, w), 5)  # about 10 ms each; this host's rounds vary 2x
    return 2 * GEMM_TOKENS * in_features * out_features / seconds / 1e12


def _tiny_layer(dtype: torch.dtype) -> Callable[[], object]:
    """A decoder layer's ops at a width too small for their bytes to count: norms, the fused
    projections, RoPE, attention of one query, the gated MLP, the residual adds."""
    hidden, heads, head_dim = 64, 4, 16
    x = torch.randn(1, hidden).to(dtype)  # [num_tokens, hidden]
    w_qkv, w_o = torch.randn(3 * hidden, hidden).to(dtype), torch.randn(hidden, hidden).to(dtype)
    w_up, w_down = torch.randn(2 * hidden, hidden).to(dtype), torch.randn(hidden, hidden).to(dtype)
    norm = torch.ones(hidden, dtype=dtype)
    cos, sin = torch.randn(1, heads, head_dim).to(dtype), torch.randn(1, heads, head_dim).to(dtype)
    kv = torch.randn(1, heads, 16, head_dim).to(dtype)  # [num_seqs, heads, num_tokens, head_dim]

    def layer() -> object:
        h = torch.nn.functional.rms_norm(x, (hidden,), norm)
        q, k, v = torch.nn.functional.linear(h, w_qkv).split(hidden, dim=-1)
        q = q.view(1, heads, head_dim) * cos + q.view(1, heads, head_dim).flip(-1) * sin
        k = k.view(1, heads, head_dim) * cos + k.view(1, heads, head_dim).flip(-1) * sin
        o = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), kv, kv)
        h = x + torch.nn.functional.linear(o.reshape(1, hidden) + v, w_o)
        g, u = torch.nn.functional.linear(torch.nn.functional.rms_norm(h, (hidden,), norm), w_up).chunk(2, -1)
        return h + torch.nn.functional.linear(torch.nn.functional.silu(g) * u + k.reshape(1, hidden), w_down)

    return layer


def layer_seconds(dtype: torch.dtype) -> float:
    """The engine's fixed seconds per decoder layer of a decode step (ENGINE_LAYER_VS_TINY x the tiny layer)."""
    layer = _tiny_layer(dtype)
    return ENGINE_LAYER_VS_TINY * _best(lambda: [layer() for _ in range(20)], 5) / 20


def kv_read_gbs() -> float:
    """KV bytes per second decode attention reads: KV_READ_SHARE x the RAM read rate."""
    buffer = torch.ones(READ_BYTES // 4, dtype=torch.float32)
    return KV_READ_SHARE * buffer.nbytes / _best(buffer.sum, 3) / 1e9


def measure_cpu_rates(dtype_name: str | None = None) -> dict[str, float | str]:
    """The CPU engine's rates at `dtype_name` (None: the dtype the engine picks here)."""
    dtype_name = dtype_name or pick_cpu_dtype()
    dtype = getattr(torch, dtype_name)
    return {
        "cpu_dtype": dtype_name,
        "cpu_gemv_gbs": gemv_gbs(dtype),
        "cpu_gemm_tflops": gemm_tflops(dtype),
        "cpu_layer_s": layer_seconds(dtype),
        "cpu_kv_gbs": kv_read_gbs(),
    }


def main() -> None:
    """Measure and cache this host's CPU rates (what the planner runs at first use)."""
    rates = measure_cpu_rates()
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    path = save_cpu_rates(cpu_host_key(), {**rates, "cpu_rates_at": now})
    print(f"CPU rates cached in {path}: {rates}")


if __name__ == "__main__":
    main()
