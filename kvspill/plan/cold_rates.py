"""The rates of the exact cold paths and the rule `--cold-attention auto` follows: the stream
path's and the gather kernel's share of PCIe, the CPU path's rate per KV format and its fixed time
per layer, split's division, what an eager cold step costs beyond its bytes, and when a step
splits. The plan (plan/costs.py) and the engine (attention/cold/config.py) divide by these same rules.
No torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspill.plan.bandwidths import GB, Bandwidths

# Share of pinned H2D that the engine's stream path attends cold KV at, when not calibrated:
# 40 of 55 GB/s on the H200 host with 2 MiB blocks (docs/performance-history.md, 2026-11-26).
STREAM_EFFICIENCY = 0.73
# --cold-attention sparse: the selected blocks are read in place from pinned memory by a gather
# kernel, 50.6-50.9 GB/s for 4-32 KiB pieces against 55 GB/s of pinned H2D on the bench hosts
# (DESIGN.md, "The physics").
GATHER_EFFICIENCY = 0.92

# Exact cold steps that run eagerly (attention/cold/dispatch.py; a stream step replays a CUDA graph
# instead where runner/stream_graphs.py allows: one cold sequence, all of it in the pinned cpu
# tier, no CPU share) cost beyond their bytes:
# - a stream step: the host launches each staging chunk's gather, decode kernel and merge from
#   Python, ~15 Triton launches and ~13 index_selects per layer. With a small cold part that host
#   work bounds the step: fp8 KV at W3 128K (19K cold tokens, ~31 ms of bytes) took 54-89 ms per
#   token on four H200 hosts, 1.7-2.8 ms per layer. The step is at least this per layer.
EAGER_STREAM_HOST_PER_LAYER_S = 2.0e-3
# - a split step beyond both parts' time (each layer's hand-over, `cpu_layer_s`, is already in the
#   CPU part; both parts' own ms per token match the plan's): (step - plan without it) / layers,
#   W3 on H200 hosts. bf16 KV 0.32-1.24 ms at 72K-128K, ten rows on five hosts; fp8 KV
#   0.9-1.83 ms at 128K-256K, five rows on three hosts (2026-11-27: bench/results/
#   2026-11-27-h200-split-gpu-waits/, -cpu-kernel/, -stream-graphs/, -auto-crossover/). Likely the
#   host's launches competing with the CPU kernel's threads, longer for fp8's slower conversion.
#   int8 KV 2.7 ms: one row, W3 128K split on one H200 host (2026-11-27 23:50 UTC, bench/results/
#   2026-11-27-h200-plan-rope-peer/: 8.15 tok/s, 11.8 planned with fp8's 1.5 ms), a fit, not a
#   prediction. int8's graphed stream step (29 tok/s there) is what `auto` takes at that size.
SPLIT_EXTRA_PER_LAYER_S = {"fp32": 0.7e-3, "bf16": 0.7e-3, "fp16": 0.7e-3, "fp8": 1.5e-3, "int8": 2.7e-3}
# The CPU cold path's time per layer beyond its bytes: q goes down, the worker wakes, the
# kernel's threads start, the result goes up while the GPU waits for it (storage/stream_flag.py).
# Fit to W1 `--attention cpu` at 32K and 128K (a line through the two rows' CPU ms per layer
# against their bytes) on two H200 hosts: 0.30 and 0.65 ms (2026-11-27,
# bench/results/2026-11-27-h200-split-gpu-waits/); their mean. Without it the plan put W1 32K at
# 1.2-1.4x its measured speed.
CPU_ATTN_OVERHEAD_PER_LAYER_S = 0.45e-3


# The CPU kernel's work is per value (a conversion, then FMAs), so its rate in KV bytes follows
# the format; the calibration times bf16. Rates against bf16's, 256K tokens in RAM, 16 threads of
# one H200 host (bench/results/2026-11-27-h200-cpu-kernel/kernel.txt): fp32 1.27, int8 0.54,
# fp8 0.47. fp16 0.82: the 2-core dev host, KV in cache (its conversion is the slower 16-bit one).
CPU_ATTN_RATE_VS_BF16 = {"fp32": 1.27, "bf16": 1.0, "fp16": 0.82, "fp8": 0.47, "int8": 0.54}


# Each (query row, key) dot also costs a fixed amount (its reduction, its share of the softmax),
# worth this many values' work: the calibration's head_dim 128 pays it once per 128 values, a
# head_dim of 64 once per 64. Fit to the kernel at head_dim 64 against 128 (bf16, 2-core dev host,
# 2026-11-27: 0.82-0.87 of its GB/s; W1 is a head_dim-64 model).
CPU_ATTN_DOT_OVERHEAD_VALUES = 27.0


def cpu_kv_rate(bw_cpu_attn_gbs: float, kv_format: str, head_dim: int = 128) -> float:
    """The CPU path's GB/s over KV of `kv_format` (a key of CPU_ATTN_RATE_VS_BF16) and
    `head_dim`, from the rate calibrated over bf16 at head_dim 128."""
    k = CPU_ATTN_DOT_OVERHEAD_VALUES
    return bw_cpu_attn_gbs * CPU_ATTN_RATE_VS_BF16[kv_format] * (1 + k / 128) / (1 + k / head_dim)


def cpu_layer_seconds(bw: Bandwidths) -> float:
    """The CPU cold path's fixed time per layer: calibrated (`cpu_attn_layer_s`), else the constant."""
    return CPU_ATTN_OVERHEAD_PER_LAYER_S if bw.cpu_attn_layer_s is None else bw.cpu_attn_layer_s


def split_cpu_share(layer_bytes: float, stream_gbs: float, cpu_gbs: float, cpu_layer_s: float) -> float:
    """The CPU's share of a layer's cold bytes under "split" such that both parts end together:
    s * c / B_cpu + t_cpu = (1 - s) * c / B_stream, so s = (c / B_stream - t_cpu) / (c / B_cpu +
    c / B_stream), in [0, 1]; 0 where the hand-over alone outlasts streaming everything. Without a
    fixed time it is the rates' ratio B_cpu / (B_cpu + B_stream). The engine (attention/cold/dispatch.py)
    and the plan divide by this same rule."""
    if layer_bytes <= 0:
        return 0.0
    c = layer_bytes / GB
    share = (c / stream_gbs - cpu_layer_s) / (c / cpu_gbs + c / stream_gbs)
    return min(1.0, max(0.0, share))


# --cold-attention auto on a GPU splits cold decode KV between the stream and the CPU where a
# calibration measured both and the CPU reaches at least this share of the stream path's rate.
# Running beside the stream the CPU attends at 0.69-0.77 of its rate alone (W3 128K, three H200
# hosts, 2026-11-27, bench/results/2026-11-27-h200-split-gpu-waits/), so split beats streaming
# alone once B_cpu > ~0.4 B_stream; measured there at ratios 0.75-1.03: 1.4-1.6x stream.
AUTO_SPLIT_MIN_CPU_RATIO = 0.5
# ... and only in steps whose decode rows' cold KV would stream for at least this long per layer:
# below it the CPU's hand-over (q down, a worker wakes, its result up: about 0.25 ms per layer
# on those hosts) costs more than its share saves.
AUTO_SPLIT_MIN_STREAM_S = 1e-3


@dataclass(frozen=True)
class SplitThresholds:
    """Cold bytes per layer of a step's decode rows from which "split" hands the CPU a share;
    fewer stream them all (the CPU's hand-over would cost more than its share saves). Zero:
    every step splits (`--cold-attention split`). The plan's step and the engine's both ask `splits`."""

    min_layer_bytes: int = 0  # auto_split_min_layer_bytes
    # ... where the step could otherwise replay a stream graph (graphed_split_min_layer_bytes)
    min_layer_bytes_graphed: int | float = 0

    def least(self, graphable: bool) -> float:
        return max(self.min_layer_bytes, self.min_layer_bytes_graphed) if graphable else self.min_layer_bytes

    def splits(self, layer_bytes: float, graphable: bool) -> bool:
        return layer_bytes >= self.least(graphable)


def auto_uses_split(bw: Bandwidths) -> bool:
    """Whether "auto" cold attention on a GPU splits (see AUTO_SPLIT_MIN_CPU_RATIO): only with
    a calibration that measured the stream path and the CPU path on this host."""
    if bw.measured_at is None or not bw.stream_gbs or not bw.cpu_attn_gbs:
        return False
    return bw.cpu_attn_gbs >= AUTO_SPLIT_MIN_CPU_RATIO * bw.stream_gbs


def auto_path_summary(bw: Bandwidths) -> str | None:
    """What "auto" cold attention does on this calibrated GPU host, for `doctor --calibrate`;
    None without both cold-path rates (no GPU)."""
    if not bw.stream_gbs or not bw.cpu_attn_gbs:
        return None
    ratio = bw.cpu_attn_gbs / bw.stream_gbs
    if not auto_uses_split(bw):
        return (
            f"--cold-attention auto: stream (the CPU path attends cold KV at {ratio:.2f}x the stream "
            f"path's rate; auto splits from {AUTO_SPLIT_MIN_CPU_RATIO}x)"
        )
    least = auto_split_min_layer_bytes(bw) / 1e6
    graphed = graphed_split_min_layer_bytes(bw, bw.cpu_attn_gbs, cpu_layer_seconds(bw)) / 1e6
    return (
        f"--cold-attention auto: split (the CPU path attends cold KV at {ratio:.2f}x the stream "
        f"path's rate; steps with under {least:.0f} MB of cold KV per layer stream it all, and "
        + (
            f"under {graphed:.0f} MB (bf16 KV) where the step could replay a stream graph)"
            if graphed != float("inf")
            else "every step that could replay a stream graph streams)"
        )
    )


def auto_split_min_layer_bytes(bw: Bandwidths) -> int:
    """Cold bytes per layer below which an "auto" step streams everything (AUTO_SPLIT_MIN_STREAM_S)."""
    return round(AUTO_SPLIT_MIN_STREAM_S * (bw.stream_gbs or 0.0) * GB)


def graphed_split_min_layer_bytes(
    bw: Bandwidths, cpu_gbs: float, cpu_layer_s: float, kv_format: str = "bf16"
) -> int | float:
    """Cold bytes per layer below which an "auto" step that could replay a stream graph streams
    everything: the graph gathers at GATHER_EFFICIENCY x H2D with the step's other work beneath it,
    c / B_gather per layer, while an eager split step takes (c + B_cpu t_cpu) / (B_stream + B_cpu)
    + SPLIT_EXTRA_PER_LAYER_S[kv_format] (both parts ending together, `split_cpu_share`). Split is faster from
    the c where the two are equal (at least `auto_split_min_layer_bytes`); never (inf) where the
    gather alone outruns both paths together."""
    gather = GATHER_EFFICIENCY * (bw.h2d_gbs or 0.0) * GB
    both = ((bw.stream_gbs or 0.0) + cpu_gbs) * GB
    if gather <= 0 or both <= gather:
        return float("inf")
    fixed = cpu_gbs * GB * cpu_layer_s / both + SPLIT_EXTRA_PER_LAYER_S[kv_format]
    return max(auto_split_min_layer_bytes(bw), round(fixed / (1 / gather - 1 / both)))
