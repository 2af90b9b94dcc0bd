"""Calibration: measure the bandwidths the memory plan divides by, on this host, with the engine's
own parts; `run_calibration` saves them where the planner reads them (`plan/calibrate.py`).

`measure_bandwidths` times, on this host: pinned H2D and D2H copies of large buffers, a
device-to-device copy (read + write counted), a bf16 matmul on the GPU, CPU decode attention
(the engine's cold path over a GQA KV shape, with torch's configured threads), the host's RAM
read rate (the ceiling of that), a read of a temp file with
its pages dropped from the page cache, an fp32 matmul on the CPU, and the CPU engine's own rates
(`cpu_rates.py`: its decode GEMV, prefill matmul, per-layer cost, KV read). Without a GPU the GPU
figures stay `None` ("not measured") and the plan fills them from its defaults, saying so.

Invariants:
- Each figure is the best of a few repeats after a warm-up (a floor-chasing figure: the rate
  the hardware can reach, as the plan's floors assume).
- The CPU part takes a few seconds at most; sizes shrink further with `quick=True`.
- The cold paths are timed through `attention.cold` itself (not bare SDPA or the raw link): the
  planner imports nothing of this module, so measuring may use any engine part below the runner.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq, default_cpu_threads
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.hardware.cpu_rates import measure_cpu_rates
from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.calibrate import save_calibration
from kvspill.storage.layout import KVLayout
from kvspill.storage.storage import TieredKVStorage
from kvspill.types import TIER_CPU

MiB = 1 << 20


def _best_seconds(fn: Callable[[], object], repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    """Best wall time of `fn` over `repeats` runs after one warm-up run."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def measure_cpu_attention_gbs(
    num_tokens: int = 16384, dtype: torch.dtype | None = None, repeats: int = 3
) -> float:
    """Decode attention on the CPU (one query, GQA 32/8, head_dim 128, bf16 by default), KV GB/s."""
    dtype = dtype or torch.bfloat16
    q = torch.randn(1, 32, 1, 128).to(dtype)  # [num_seqs, num_heads, 1, head_dim]
    k = torch.randn(1, 8, num_tokens, 128).to(dtype)  # [num_seqs, num_kv_heads, num_tokens, head_dim]
    v = torch.randn(1, 8, num_tokens, 128).to(dtype)

    def attend() -> object:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return (k.nbytes + v.nbytes) / _best_seconds(attend, repeats) / 1e9


def measure_host_read_gbs(num_bytes: int = 1024 * MiB, repeats: int = 5) -> float:
    """Host RAM read rate: a sum over a float32 buffer larger than the caches, torch's threads."""
    buffer = torch.ones(num_bytes // 4, dtype=torch.float32)
    return buffer.nbytes / _best_seconds(buffer.sum, repeats) / 1e9


def measure_matmul_tflops(device: torch.device, n: int, dtype: torch.dtype, repeats: int = 3) -> float:
    """Dense [n, n] @ [n, n] matmul: 2 n^3 FLOPs per run."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return 2 * n**3 / _best_seconds(lambda: a @ b, repeats, sync) / 1e12


def measure_disk_read_gbs(
    directory: str | os.PathLike[str] | None = None, num_bytes: int = 64 * MiB
) -> float:
    """Read a freshly written temp file after asking the kernel to drop it from the page cache.

    Where the cache cannot be dropped (tmpfs, some overlay filesystems) this reads RAM: an
    upper bound on the disk.
    """
    chunk = 8 * MiB
    data = os.urandom(chunk)
    buffer = bytearray(chunk)
    if directory is not None:
        Path(directory).mkdir(parents=True, exist_ok=True)  # the KV disk dir may not exist yet
    with tempfile.NamedTemporaryFile(dir=directory, prefix="kvspill-calib-", delete=False) as f:
        path = f.name
        for _ in range(max(1, num_bytes // chunk)):
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            start, total = time.perf_counter(), 0
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as reader:
                while (n := reader.readinto(buffer)) and n > 0:
                    total += n
            elapsed = time.perf_counter() - start
        finally:
            os.close(fd)
    finally:
        os.unlink(path)
    return total / max(elapsed, 1e-9) / 1e9


def measure_copy_gbs(device: torch.device, copy_bytes: int) -> tuple[float, float, float]:
    """(pinned H2D, pinned D2H, HBM copy with read + write counted) in GB/s; best of 5.

    The device buffers go back to the driver, not just to torch's cache: an engine built next in
    this process would place its weights inside those cached segments, strand the rest of them,
    and size its KV pool that much smaller (the W1 benchmarks lost ~1.1 GiB of KV this way)."""
    rates = _copy_rates(device, copy_bytes)  # its buffers die with its frame
    torch.cuda.empty_cache()
    return rates


def _copy_rates(device: torch.device, copy_bytes: int) -> tuple[float, float, float]:
    sync = torch.cuda.synchronize
    host = torch.empty(copy_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(copy_bytes, dtype=torch.uint8, device=device)
    h2d = copy_bytes / _best_seconds(lambda: dev.copy_(host, non_blocking=True), 5, sync) / 1e9
    d2h = copy_bytes / _best_seconds(lambda: host.copy_(dev, non_blocking=True), 5, sync) / 1e9
    other = torch.empty_like(dev)
    hbm = 2 * copy_bytes / _best_seconds(lambda: other.copy_(dev), 5, sync) / 1e9
    return h2d, d2h, hbm


def _measure_gpu(device: torch.device, copy_bytes: int) -> dict[str, Any]:
    """Pinned H2D/D2H, HBM copy (read + write counted), bf16 matmul; plus the card's name and size."""
    h2d, d2h, hbm = measure_copy_gbs(device, copy_bytes)
    props = torch.cuda.get_device_properties(device)
    return dict(
        h2d_gbs=h2d,
        d2h_gbs=d2h,
        hbm_gbs=hbm,
        gpu_tflops=measure_matmul_tflops(device, 8192, torch.bfloat16, repeats=5),
        gpu_name=props.name,
        gpu_total_bytes=int(props.total_memory),
    )


# Cold blocks the stream and CPU paths are timed over, `quick` or not. Each layer's call has a
# fixed cost (launches, q down, o up), so fewer blocks measure that cost more than the rate. On
# one H200 machine `--quick` (then 256 blocks) gave stream 17.7 and cpu 15.9 GB/s; on another, the
# full calibration gave 41.7 and 31.2. W3's split decoded at the same speed on both (5.02 and 5.00
# tok/s), and the plan from the quick figures predicted half the measured speed
# (bench/results/2026-11-27-h200-attention-cpu-w1/). 1024 blocks of 4 layers take under a second.
COLD_PATH_BLOCKS = 1024
# The CPU path is timed over a pool of this many blocks (1 GiB in 4 layers: past the 300 MiB L3
# of the H200 hosts, where 1024 blocks would be read from cache) and over this few blocks per
# layer, which its fixed time per layer dominates: the two times give its rate and that fixed
# time (`measure_cpu_cold_path`).
CPU_PATH_BLOCKS = 4096
CPU_PATH_FEW_BLOCKS = 16


def _layout(num_layers: int) -> KVLayout:
    """The calibration's KV layout: Llama-3.1-8B's (bf16, 16 tokens, 8 KV heads of 128: 64 KiB of
    K+V per block and layer)."""
    return KVLayout(num_layers, 16, 8, 128, torch.bfloat16)


def _cold_path_seconds(
    device: torch.device, path: str, num_blocks: int, num_layers: int, attended: Sequence[int]
) -> list[float]:
    """Best seconds of one decode query over each of `attended` cold blocks per layer (a prefix
    of a `num_blocks` pool of `_layout`), through the engine's own cold path, all `num_layers`
    layers."""
    layout = _layout(num_layers)
    storage = TieredKVStorage(layout, 4, device, num_cpu_blocks=num_blocks)
    storage.cpu_cache.normal_()
    # a worker as in the engine on a GPU (attention/cold/config.engine_cold_config): its hand-over is
    # part of the fixed time measured
    workers = 1 if path == "cpu" and device.type == "cuda" else 0
    threads = default_cpu_threads(device, workers)  # the engine's own count
    config = ColdAttentionConfig(path=path, cpu_workers=workers, cpu_threads=threads)
    backend = ColdAttentionBackend(storage, config)
    q = torch.randn(1, 32, 128, dtype=torch.bfloat16, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    seconds = []
    for n in attended:
        seq = ColdSeq(0, 1, np.full(n, TIER_CPU), np.arange(n, dtype=np.int64))

        def attend(seq: ColdSeq = seq) -> None:
            step = backend.for_step([seq], 128**-0.5)
            assert step is not None
            for layer in range(num_layers):
                step.finish(step.begin(layer, q))

        seconds.append(_best_seconds(attend, 3, sync))
    backend.close()
    return seconds


def measure_cold_path_gbs(
    device: torch.device, path: str, num_blocks: int = COLD_PATH_BLOCKS, num_layers: int = 4
) -> float:
    """Cold KV attended per second by the engine's own cold path ("stream" or "cpu"), one decode
    query over `num_blocks` cold blocks per layer, fixed costs included. This is what exact decode
    over cold KV reaches; the raw link or SDPA figures overstate it."""
    (seconds,) = _cold_path_seconds(device, path, num_blocks, num_layers, [num_blocks])
    return num_blocks * _layout(num_layers).block_bytes / seconds / 1e9


def measure_cpu_cold_path(
    device: torch.device, num_blocks: int = COLD_PATH_BLOCKS, num_layers: int = 4
) -> tuple[float, float]:
    """The engine's CPU cold path as (GB/s of KV, fixed seconds per layer): timed over
    `num_blocks` and over CPU_PATH_FEW_BLOCKS blocks per layer, the line through the two.
    The plan charges cold bytes over the rate plus the fixed time per layer; the split
    (`plan.costs.split_cpu_share`) needs both to end its two parts together."""
    few = min(CPU_PATH_FEW_BLOCKS, num_blocks - 1)
    t_few, t_all = _cold_path_seconds(device, "cpu", num_blocks, num_layers, [few, num_blocks])
    bytes_per_block = _layout(num_layers).block_bytes
    per_byte = max(t_all - t_few, 1e-9) / ((num_blocks - few) * bytes_per_block)
    fixed = max(0.0, t_few - few * bytes_per_block * per_byte) / num_layers
    return 1 / per_byte / 1e9, fixed


def measure_bandwidths(
    device: str | torch.device | None = None,
    disk_dir: str | os.PathLike[str] | None = None,
    quick: bool = False,
) -> Bandwidths:
    """Measure what this host has; GPU figures stay None without a CUDA device."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    figures: dict[str, Any] = {}
    if device.type == "cuda":
        figures.update(_measure_gpu(device, (256 if quick else 1024) * MiB))
        figures["stream_gbs"] = measure_cold_path_gbs(device, "stream")
    # The engine's CPU cold path (what --cold-attention cpu/split run), not bare SDPA.
    figures["cpu_attn_gbs"], figures["cpu_attn_layer_s"] = measure_cpu_cold_path(
        device, COLD_PATH_BLOCKS if quick else CPU_PATH_BLOCKS
    )
    # 1 GiB: a 256 MiB buffer fits the 300 MiB L3 of the H200 hosts; one calibration read it at
    # 199.8 GB/s, others at 90-112 (bench/results/2026-11-27-h200-cpu-kernel/)
    figures["host_read_gbs"] = measure_host_read_gbs((256 if quick else 1024) * MiB)
    figures["cpu_tflops"] = measure_matmul_tflops(torch.device("cpu"), 512 if quick else 1024, torch.float32)
    figures["disk_read_gbs"] = measure_disk_read_gbs(disk_dir, (32 if quick else 128) * MiB)
    figures.update(measure_cpu_rates())  # what a plan of the engine on this CPU divides by
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    figures["cpu_rates_at"] = now
    where = figures.get("gpu_name") or "cpu only"
    return Bandwidths(**figures, measured_at=now, source=f"measured now ({where}, {now})")


def run_calibration(
    save_path: str | os.PathLike[str] | None = None,
    disk_dir: str | os.PathLike[str] | None = None,
    quick: bool = False,
) -> Bandwidths:
    """Measure this host (disk read under `disk_dir`: the KV disk dir), save, return as read back."""
    measured = measure_bandwidths(disk_dir=disk_dir, quick=quick)
    target = save_calibration(measured, save_path)
    return replace(measured, source=f"calibration {target} {measured.measured_at}")
