"""CPU decode attention over blocked KV: `python -m kvspill.bench.cpu_attention_bench`.

Prints, per KV dtype and context length, GB/s of KV read (one layer's K and V of every block,
best of `--repeats` wall times) for:
- kernel: `cpu_paged_attention`, the C++ kernel reading blocks in place through a shuffled
  block table (what `--cold-attention cpu` runs);
- gather+flash: index_select of the blocks, then torch's CPU flash kernel (the fallback without
  a compiler, and the engine's CPU path before the kernel);
- sdpa: plain torch SDPA over contiguous KV (no block table: an upper bound torch offers);
beside the host's RAM read rate (`hardware.calibrate.measure_host_read_gbs`, the figure `kvspill
doctor --calibrate` prints as host_read_gbs) measured in the same run, and the kernel's share
of it. Shape: Llama-3.1-8B attention (32 query heads, 8 KV heads, head_dim 128), 16-token
blocks, a 2-layer pool seen through one layer's offsets, one decode query.

The load average is printed too: on a shared host other processes take cores and bandwidth.
Invariant: importing this module does nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from kvspill.attention.cold.merge import attend_unmasked_cpu
from kvspill.hardware.calibrate import measure_host_read_gbs
from kvspill.kernels.cpu_attention import CpuParts, cpu_paged_attention, load_kernel

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_LAYERS = 32, 8, 128, 16, 2
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _best_seconds(
    fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return max(best, 1e-9)


def bench_case(
    dtype: torch.dtype, num_tokens: int, threads: int, repeats: int, clock: Callable[[], float]
) -> dict[str, float]:
    """GB/s of one layer's KV for the kernel, gather + flash and contiguous SDPA."""
    num_blocks = num_tokens // BLOCK_SIZE
    pool = torch.randn(num_blocks, NUM_LAYERS, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM).to(dtype)
    ids = np.random.default_rng(0).permutation(num_blocks).astype(np.int64)
    parts = CpuParts.single(ids, 0, 1)
    q = torch.randn(1, NUM_HEADS, HEAD_DIM).to(dtype)
    out = (torch.empty(1, NUM_HEADS, HEAD_DIM), torch.empty(1, NUM_HEADS))
    layer_bytes = num_blocks * 2 * BLOCK_SIZE * NUM_KV_HEADS * HEAD_DIM * pool.element_size()
    scale = HEAD_DIM**-0.5
    index = torch.from_numpy(ids)

    def gather_flash() -> object:
        kv = pool[:, 1].index_select(0, index)  # [n, 2, block_size, kv, dim]
        k = kv[:, 0].reshape(-1, NUM_KV_HEADS, HEAD_DIM)
        v = kv[:, 1].reshape(-1, NUM_KV_HEADS, HEAD_DIM)
        splits = max(1, -(-threads // NUM_KV_HEADS))
        return attend_unmasked_cpu(q, k, v, scale, splits if num_tokens % splits == 0 else 1)

    k_contig = torch.randn(1, NUM_KV_HEADS, num_tokens, HEAD_DIM).to(dtype)
    v_contig = torch.randn(1, NUM_KV_HEADS, num_tokens, HEAD_DIM).to(dtype)
    q_sdpa = q.view(1, NUM_HEADS, 1, HEAD_DIM)

    def sdpa() -> object:
        return torch.nn.functional.scaled_dot_product_attention(q_sdpa, k_contig, v_contig, enable_gqa=True)

    result = {
        "kernel_gbs": layer_bytes
        / _best_seconds(lambda: cpu_paged_attention(q, pool, 1, parts, scale, out, threads), repeats, clock)
        / 1e9,
        "gather_flash_gbs": layer_bytes / _best_seconds(gather_flash, repeats, clock) / 1e9,
        "sdpa_gbs": layer_bytes / _best_seconds(sdpa, repeats, clock) / 1e9,
    }
    return result


def _host_read_gbs(clock: Callable[[], float]) -> float:
    """`measure_host_read_gbs` (the calibration's figure) under the bench's clock."""
    if clock is time.perf_counter:
        return measure_host_read_gbs(256 << 20)
    buffer = torch.ones((256 << 20) // 4)
    return buffer.nbytes / _best_seconds(buffer.sum, 5, clock) / 1e9


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="4096,16384,65536,131072", help="tokens, comma-separated")
    ap.add_argument("--dtypes", default="bf16,fp32", help=f"of {sorted(DTYPES)}")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="one thread, timed by the thread's CPU time: per-core rates that other processes "
        "time-slicing the cores do not distort (they still share the memory bus)",
    )
    ap.add_argument("--out", help="append JSON lines here")
    args = ap.parse_args(argv)
    clock = time.perf_counter
    if args.cpu_time:  # every op then runs on the calling thread (OpenMP teams of one)
        args.threads, clock = 1, time.thread_time
    if load_kernel() is None:
        raise SystemExit("the CPU attention kernel could not be built (see the warning above)")
    torch.set_num_threads(args.threads)
    contexts = [int(c) for c in args.contexts.split(",")]
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"{'dtype':<5} {'tokens':>7} {'kernel':>7} {'gather+flash':>12} {'sdpa':>6} {'host read':>9} {'kernel/read':>11}"
    )
    for name in args.dtypes.split(","):
        for num_tokens in contexts:
            row = bench_case(DTYPES[name], num_tokens, args.threads, args.repeats, clock)
            row["host_read_gbs"] = _host_read_gbs(clock)  # same moment, same contention
            share = row["kernel_gbs"] / row["host_read_gbs"]
            print(
                f"{name:<5} {num_tokens:>7} {row['kernel_gbs']:>7.2f} {row['gather_flash_gbs']:>12.2f} "
                f"{row['sdpa_gbs']:>6.2f} {row['host_read_gbs']:>9.2f} {share:>11.2f}"
            )
            if args.out:
                record = {"dtype": name, "tokens": num_tokens, "threads": args.threads, **row}
                record["clock"] = "thread CPU time" if args.cpu_time else "wall"
                record["load_avg"] = os.getloadavg()[0]
                with open(args.out, "a") as f:
                    f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
