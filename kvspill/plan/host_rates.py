"""The rates a plan divides by on this host, and the plan of an engine on a host without a GPU.

On a host with no CUDA GPU the engine runs on the CPU: its "gpu" tier is host RAM, and decode is
the weights read by the CPU's matmuls, the KV attended on the CPU and each layer's fixed cost
(plan/costs.py `cpu_decode_floor`). `cpu_host_bandwidths` gives those rates, from the first of:
1. the saved calibration (`kvspill doctor --calibrate`), where it has them;
2. the quick measurement of this CPU cached beside it (`cpu_rates.json`, one record per host);
3. that quick measurement made now, in a child process (`python -m kvspill.hardware.cpu_rates`,
   a second or two, then cached): this process stays torch-free;
4. `DEFAULT_CPU_RATES`, said to be defaults (`Bandwidths.filled` names them).
`planning_rates` is the one choice of rates for `kvspill plan` and the engine's start-up.

Invariants: no torch; the only I/O is the cache file, the calibration and the child process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvspill.env import env_settings
from kvspill.host_cpu import cpu_flags, cpuinfo
from kvspill.plan import bandwidths_for_gpu
from kvspill.plan.bandwidths import CPU_RATE_FIELDS, DEFAULT_BANDWIDTHS, Bandwidths
from kvspill.plan.request import PlanRequest

log = logging.getLogger(__name__)

# An unknown CPU: a desktop of a few cores. Assumed, not measured: the plan says so (`filled`).
DEFAULT_CPU_RATES = Bandwidths(
    device="cpu",
    cpu_dtype="float32",
    cpu_gemv_gbs=10.0,  # a GEMV over weights in RAM: a third of dual-channel DDR4/5's 30-60 GB/s
    cpu_gemm_tflops=0.2,  # fp32 on a few AVX2 cores
    cpu_layer_s=0.5e-3,  # about 20 eager ops of 25 us each per layer
    cpu_kv_gbs=5.0,
    source="defaults (not measured: run `kvspill doctor --calibrate`)",
)
# What the quick measurement gives (the rest of a CPU plan's Bandwidths is the calibration's)
_QUICK_FIELDS = (*CPU_RATE_FIELDS, "cpu_dtype", "cpu_rates_at")
MEASURE_TIMEOUT_S = 120.0  # the child takes a second or two; a loaded host may take longer
# How the cached figures were measured (kvspill/hardware/cpu_rates.py); a record of another method
# is measured again. 2: the matmul rate in the dtype a prefill computes in (fp32 for fp16 models).
CPU_RATES_METHOD = 2


def _cache_path() -> Path:
    return env_settings().calibration_path.parent / "cpu_rates.json"


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where there is none): part of the keys its
    measurements are cached under (here and plan/cpu_dtype.py)."""
    return cpuinfo("model name")


def cpu_host_key() -> str:
    """This CPU as the cache knows it: its model name and the cores this process may use."""
    model = cpu_model_name()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}|cores {cores}"


def save_cpu_rates(key: str, record: dict[str, Any], path: Path | None = None) -> Path:
    """Cache `record` (Bandwidths field -> value, `measured_at` among them) under host `key`,
    stamped with this CPU_RATES_METHOD."""
    target = path or _cache_path()
    records = _read_records(target)
    records[key] = {**record, "method": CPU_RATES_METHOD}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1) + "\n")
    tmp.replace(target)  # atomic: a reader never sees half a file
    return target


def _read_records(path: Path) -> dict[str, dict[str, Any]]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: measured again
    return {k: v for k, v in loaded.items() if isinstance(v, dict)} if isinstance(loaded, dict) else {}


def cached_cpu_rates(path: Path | None = None) -> Bandwidths | None:
    """This host's cached quick measurement, or None."""
    source = path or _cache_path()
    record = _read_records(source).get(cpu_host_key())
    if record is None or record.get("method") != CPU_RATES_METHOD:
        return None  # none, or measured another way: measured again
    rates = {f: record.get(f) for f in CPU_RATE_FIELDS}
    if not all(isinstance(v, (int, float)) and v >= 0 for v in rates.values()):
        return None  # a record of another version: measured again
    dtype, when = record.get("cpu_dtype"), record.get("cpu_rates_at")
    measured = Bandwidths(
        cpu_dtype=str(dtype) if dtype else None,
        cpu_rates_at=str(when) if when else None,
        source=f"quick measurement of this CPU, {when or 'undated'} (cached in {source})",
    )
    return replace(measured, **rates)  # type: ignore[arg-type]  # the CPU_RATE_FIELDS, all floats


def measure_cpu_rates_now() -> Bandwidths | None:
    """Time this CPU in a child process (it caches the result), then read the cache; None on failure."""
    command = [sys.executable, "-m", "kvspill.hardware.cpu_rates"]
    log.info("measuring this CPU for the plan (once; cached): %s", " ".join(command))
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=MEASURE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("could not measure this CPU (%s): the plan uses default rates", e)
        return None
    return cached_cpu_rates()


def cpu_host_bandwidths(calibration: Bandwidths | None, measure: bool = True) -> Bandwidths:
    """Rates for the engine on this CPU (the module docstring gives the order). The calibration's
    other fields stay as they are: the runtime choices read them as the engine does."""
    base = calibration or Bandwidths(source="no calibration")
    if all(getattr(base, f) is not None for f in CPU_RATE_FIELDS):
        return as_cpu_plan_rates(replace(base, cpu_rates_at=base.cpu_rates_at or base.measured_at))
    quick = cached_cpu_rates() or (measure_cpu_rates_now() if measure else None)
    if quick is None:
        return as_cpu_plan_rates(replace(base, source=DEFAULT_CPU_RATES.source))
    source = quick.source if calibration is None else f"{calibration.source}; CPU rates: {quick.source}"
    return as_cpu_plan_rates(replace(base, source=source, **{f: getattr(quick, f) for f in _QUICK_FIELDS}))


def as_cpu_plan_rates(rates: Bandwidths) -> Bandwidths:
    """`rates` as a CPU plan divides by them: device "cpu", missing CPU rates from the defaults
    (named in `filled`), and the GPU's weight and matmul fields given the CPU's meaning (the "gpu"
    tier is RAM: prefill reads the weights at the GEMV rate and multiplies at the CPU's), so no
    card's figure appears. The disk read, where not measured, is the default, said so."""
    missing = tuple(f for f in CPU_RATE_FIELDS if getattr(rates, f) is None)
    cpu = replace(
        rates, device="cpu", filled=(*rates.filled, *missing), gpu_name=None, gpu_total_bytes=None,
        cpu_dtype=rates.cpu_dtype or DEFAULT_CPU_RATES.cpu_dtype,
        **{f: getattr(DEFAULT_CPU_RATES, f) for f in missing},
    )  # fmt: skip
    if cpu.disk_read_gbs is None:  # the quick measurement leaves the disk out
        cpu = replace(
            cpu, disk_read_gbs=DEFAULT_BANDWIDTHS.disk_read_gbs, filled=(*cpu.filled, "disk_read_gbs"),
            source=f"{cpu.source}; disk read assumed",
        )  # fmt: skip
    return replace(cpu, hbm_gbs=cpu.cpu_gemv_gbs, d2h_gbs=cpu.cpu_kv_gbs, gpu_tflops=cpu.cpu_gemm_tflops)


def host_has_cuda_gpu() -> bool:
    """Whether this host shows an NVIDIA GPU to this process (without importing torch)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return Path("/dev/nvidia0").exists() or any(Path("/proc/driver/nvidia/gpus").glob("*"))


def cpu_keeps_gguf_blocks() -> bool:
    """Whether the CPU engine keeps a GGUF's blocks by default (plan/startup.keeps_gguf_quantized):
    where g++ builds the CPU GGUF kernel (kernels/cpu_build.py) and the CPU has its AVX-512 path
    (F and BW). Its portable path ran 2.5-6x slower than the AVX-512 one (an x86-64-v3 build on the
    dev host), about a dense fp32 GEMV's time, so other CPUs dequantize at load
    (bench/results/2026-12-07-cpu-gguf-gemv/)."""
    return shutil.which("g++") is not None and {"avx512f", "avx512bw"} <= cpu_flags()


def planning_rates(calibration: Bandwidths | None, gpu_name: str | None, device: str) -> Bandwidths:
    """The rates of a plan for `device`: the CPU's on "cpu"; else the calibration completed with
    the card's known figures, the card's figures, or the desktop defaults (`gpu_name` names the card)."""
    if device == "cpu":
        return cpu_host_bandwidths(calibration)
    if calibration is not None:
        return calibration.complete(bandwidths_for_gpu(calibration.gpu_name or gpu_name))
    return bandwidths_for_gpu(gpu_name) if gpu_name else DEFAULT_BANDWIDTHS


def cpu_engine_request(
    request: PlanRequest, rates: Bandwidths, host_available_bytes: int | None
) -> PlanRequest:
    """`request` (a plan from flags) as the engine on this CPU runs it: device "cpu", a GGUF's
    weights in their blocks where the CPU GGUF kernel can be built (else dense at the dtype it
    picks here), the device budget the available RAM (plan/startup.py `_device_budget`)."""
    in_blocks = request.quantization == "gguf" and cpu_keeps_gguf_blocks()
    quantization = request.quantization if request.quantization != "gguf" or in_blocks else "none"
    dtype = request.weight_dtype if request.weight_dtype != "auto" else rates.cpu_dtype or "auto"
    budget = host_available_bytes or request.vram_budget_bytes
    return replace(
        request, device="cpu", quantization=quantization, weight_dtype=dtype, vram_budget_bytes=budget
    )
