"""The rates the memory plan divides by: `Bandwidths`, and the defaults for an unknown card.

GB/s = 10**9 B/s, TFLOP/s = 10**12 FLOP/s; a `None` rate is "not measured" and is filled from
`DEFAULT_BANDWIDTHS` (the plan's `bandwidths.source` says which, `filled` names them). Rates with
`device="cpu"` plan the engine on the CPU (no CUDA GPU: the "gpu" tier is host RAM): the `cpu_*`
rates bound its decode and prefill (plan/costs.py), `DEFAULT_CPU_RATES` where not measured.
No torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GB = 1e9  # bandwidths are in GB/s: 10**9 bytes per second
RATE_FIELDS = ("hbm_gbs", "h2d_gbs", "d2h_gbs", "cpu_attn_gbs", "disk_read_gbs", "gpu_tflops", "stream_gbs")
# what a plan of the engine on the CPU divides by (plan/costs.py cpu_decode_floor)
CPU_RATE_FIELDS = ("cpu_gemv_gbs", "cpu_gemm_tflops", "cpu_layer_s", "cpu_kv_gbs")


@dataclass(frozen=True)
class Bandwidths:
    """Rates the cost model divides by. GB/s = 10**9 B/s; None: not measured (filled from defaults)."""

    hbm_gbs: float | None = None  # GPU device-to-device copy, read + write counted
    h2d_gbs: float | None = None  # pinned host -> device, large copies
    d2h_gbs: float | None = None  # device -> pinned host, large copies
    cpu_attn_gbs: float | None = None  # CPU decode attention, KV bytes read per second
    # ... and its fixed time per layer call (q down, the worker and the kernel's threads start,
    # the result up), beside the bytes; None: plan.costs.CPU_ATTN_OVERHEAD_PER_LAYER_S
    cpu_attn_layer_s: float | None = None
    disk_read_gbs: float | None = None  # sequential read of a file not in the page cache
    gpu_tflops: float | None = None  # dense bf16 matmul, 10**12 FLOP/s
    source: str = "defaults"  # "calibration <path> <date>" or "defaults ..."
    cpu_tflops: float | None = None  # fp32 matmul on the CPU (informative)
    gpu_name: str | None = None
    gpu_total_bytes: int | None = None
    measured_at: str | None = None  # ISO date-time of the calibration
    # Cold KV attended per second by the engine's stream path (gather to the GPU + attend): what
    # exact decode over cold blocks reaches; None: STREAM_EFFICIENCY x h2d_gbs.
    stream_gbs: float | None = None
    # Host RAM read rate (a torch sum over a large fp32 buffer with torch's threads): the ceiling
    # of CPU attention over the cpu tier (informative: cpu_attn_gbs is what the plan divides by).
    host_read_gbs: float | None = None
    # The engine on the CPU (plan/host_rates.py): "cpu" plans it, "cuda" a GPU (the default).
    device: str = "cuda"
    cpu_dtype: str | None = None  # the dtype the cpu_* rates below were timed at (plan/cpu_dtype.py)
    cpu_gemv_gbs: float | None = None  # weight bytes a decode step's projections read per second
    cpu_gemm_tflops: float | None = None  # a prefill chunk's projections, 10**12 FLOP/s
    cpu_layer_s: float | None = None  # a CPU decode step's fixed seconds per layer (its ops' dispatch)
    cpu_kv_gbs: float | None = None  # KV bytes a CPU decode step's attention reads from its pool per second
    cpu_rates_at: str | None = None  # ISO date-time the cpu_* rates were measured
    filled: tuple[str, ...] = ()  # the rates `complete` took from a fallback: not measured here

    def complete(self, fallback: Bandwidths) -> Bandwidths:
        """Self with every missing rate taken from `fallback`; `source` says which ones."""
        missing = [name for name in RATE_FIELDS if getattr(self, name) is None]
        if not missing:
            return self
        filled: dict[str, float | None] = {name: getattr(fallback, name) for name in missing}
        if self.device == "cpu":  # a GPU's links and HBM enter no CPU plan (costs.cpu_decode_floor)
            return replace(self, filled=(*self.filled, *missing), **filled)  # type: ignore[arg-type]
        source = f"{self.source}; {', '.join(missing)} from {fallback.source}"
        return replace(self, source=source, filled=(*self.filled, *missing), **filled)  # type: ignore[arg-type]


# Unknown card: a desktop-class default is the honest guess (the project targets 8-24 GB cards).
DEFAULT_BANDWIDTHS = Bandwidths(
    hbm_gbs=900.0,  # RTX 4090 class: 1008 GB/s GDDR6X spec, about 90% reached by a device copy
    h2d_gbs=25.0,  # DESIGN.md, the physics: "a desktop (PCIe 4 about 25 GB/s ...)"
    d2h_gbs=25.0,  # same link, pinned memory
    # dual-channel DDR5 reads 35-60 GB/s (DESIGN.md); bf16 SDPA on the bench host reached 35 of its
    # 109 GB/s (bench/README.md): about a third of ~60
    cpu_attn_gbs=20.0,
    disk_read_gbs=3.0,  # assumed: sustained read of a PCIe 4 NVMe (no measurement in the repo yet)
    gpu_tflops=100.0,  # assumed: about 60% of the RTX 4090's 165 dense bf16 TFLOP/s
    source="defaults (desktop class: RTX 4090, PCIe 4, dual-channel DDR5): run `kvspill doctor --calibrate`",
)
