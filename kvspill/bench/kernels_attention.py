"""Benchmark of the attention and fused kernels on a CUDA GPU: `python -m kvspill.bench.kernels_attention`.

Prints, per case, the median time (triton.testing.do_bench; decode and fused ops replayed from a
CUDA graph, as the engine runs them) and the achieved rate against the
card's ceiling: decode attention in GB/s of KV read (bandwidth-bound; the ceiling printed is a
device-to-device copy measured here, read + write bytes), prefill attention in TFLOP/s
(compute-bound; 4 * heads * head_dim FLOPs per attended query-key pair), fused ops in GB/s of
bytes read + written. bf16, Llama-3.2-1B (32/8 heads, dim 64) and Llama-3.1-8B (32/8, dim 128)
attention shapes; caches are 2-layer tensors seen through a strided layer view, with shuffled
block tables, as in the engine.

Invariant: importing this module does nothing; without CUDA `main` says so and returns.
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
import triton.testing

from kvspill.kernels.decode_attention import choose_num_splits, paged_decode_attention
from kvspill.kernels.fused_ops import apply_rope, rms_norm, silu_and_mul
from kvspill.kernels.prefill_attention import paged_prefill_attention

SHAPES = {"llama-3.2-1b": (32, 8, 64), "llama-3.1-8b": (32, 8, 128)}  # num_heads, num_kv_heads, head_dim
BLOCK_SIZE = 16
DTYPE = torch.bfloat16


def _bench_ms(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def _bench_graph_ms(fn) -> float:
    """Median time of fn replayed from a CUDA graph, as the engine runs decode steps: without the
    graph, Python launch overhead (tens of us per wrapper call) hides short kernels."""
    return float(triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median"))


def _copy_ceiling_gbps() -> float:
    """Device-to-device copy of 1 GiB, counting bytes read and written."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _bench_ms(partial(dst.copy_, src))
    return 2 * (1 << 30) / ms / 1e6


def _paged_cache(seq_lens: list[int], num_kv_heads: int, head_dim: int):
    """A random 2-layer cache with shuffled blocks; returns (kv_layer, block_tables, seq_lens)."""
    blocks_per_seq = [-(-n // BLOCK_SIZE) for n in seq_lens]
    num_blocks = sum(blocks_per_seq)
    kv_cache = torch.randn((num_blocks, 2, 2, BLOCK_SIZE, num_kv_heads, head_dim), dtype=DTYPE, device="cuda")
    ids = torch.randperm(num_blocks, device="cuda").to(torch.int32)
    block_tables = torch.zeros((len(seq_lens), max(blocks_per_seq)), dtype=torch.int32, device="cuda")
    start = 0
    for s, n in enumerate(blocks_per_seq):
        block_tables[s, :n] = ids[start : start + n]
        start += n
    lens = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    return kv_cache[:, 1], block_tables, lens


def bench_decode(ceiling_gbps: float, contexts: list[int], batches: list[int]) -> None:
    print(f"\n== decode attention (bf16), ceiling {ceiling_gbps:.0f} GB/s (D2D copy, read + write)")
    print(f"{'shape':<14}{'batch':>6}{'context':>9}{'splits':>7}{'us':>10}{'GB/s':>9}{'% ceil':>8}")
    for name, (num_heads, num_kv_heads, head_dim) in SHAPES.items():
        for batch in batches:
            for context in contexts:
                kv_layer, block_tables, seq_lens = _paged_cache([context] * batch, num_kv_heads, head_dim)
                q = torch.randn((batch, num_heads, head_dim), dtype=DTYPE, device="cuda")
                out = (
                    torch.empty_like(q),
                    torch.empty((batch, num_heads), dtype=torch.float32, device="cuda"),
                )
                num_sms = torch.cuda.get_device_properties(0).multi_processor_count
                splits = choose_num_splits(block_tables.shape[1] * BLOCK_SIZE, batch, num_kv_heads, num_sms)
                ms = _bench_graph_ms(
                    partial(
                        paged_decode_attention, q, kv_layer, block_tables, seq_lens, head_dim**-0.5, out=out
                    )
                )
                kv_bytes = batch * context * num_kv_heads * head_dim * 2 * DTYPE.itemsize
                gbps = kv_bytes / ms / 1e6
                print(
                    f"{name:<14}{batch:>6}{context:>9}{splits:>7}{ms * 1e3:>10.1f}{gbps:>9.0f}"
                    f"{100 * gbps / ceiling_gbps:>7.0f}%"
                )
                del kv_layer, block_tables, q, out
                torch.cuda.empty_cache()


def bench_prefill(context: int, chunk: int) -> None:
    print(f"\n== prefill attention (bf16), chunk {chunk} at the end of a {context}-token context")
    print(f"{'shape':<14}{'ms':>9}{'TFLOP/s':>9}")
    for name, (num_heads, num_kv_heads, head_dim) in SHAPES.items():
        kv_layer, block_tables, seq_lens = _paged_cache([context], num_kv_heads, head_dim)
        q = torch.randn((chunk, num_heads, head_dim), dtype=DTYPE, device="cuda")
        qsl = torch.tensor([0, chunk], dtype=torch.int32, device="cuda")
        ms = _bench_ms(
            partial(
                paged_prefill_attention,
                q,
                kv_layer,
                block_tables,
                qsl,
                seq_lens,
                head_dim**-0.5,
                max_query_len=chunk,
            )
        )
        pairs = chunk * (context - chunk) + chunk * (chunk + 1) // 2  # causal query-key pairs
        tflops = 4 * num_heads * head_dim * pairs / ms / 1e9
        print(f"{name:<14}{ms:>9.3f}{tflops:>9.1f}")


def bench_fused(batches: list[int]) -> None:
    print("\n== fused ops (bf16), Llama-3.1-8B sizes: GB/s of bytes read + written")
    print(f"{'op':<22}{'tokens':>7}{'us':>9}{'GB/s':>8}")
    hidden, inter, item = 4096, 14336, DTYPE.itemsize
    for n in batches:
        x = torch.randn((n, hidden), dtype=DTYPE, device="cuda")
        res = torch.randn_like(x)
        w = torch.randn(hidden, dtype=DTYPE, device="cuda")
        gate_up = torch.randn((n, 2 * inter), dtype=DTYPE, device="cuda")
        qkv = torch.randn((n, 48, 128), dtype=DTYPE, device="cuda")
        positions = torch.randint(0, 8192, (n,), device="cuda")
        cos_sin = torch.randn((8192, 128), dtype=torch.float32, device="cuda")
        cases = [
            ("rms_norm", partial(rms_norm, x, w, 1e-5), 2 * n * hidden * item),
            ("rms_norm + residual", partial(rms_norm, x, w, 1e-5, res), 4 * n * hidden * item),
            ("silu_and_mul", partial(silu_and_mul, gate_up), 3 * n * inter * item),
            (
                "apply_rope 32q/8k",
                partial(apply_rope, qkv[:, :32], qkv[:, 32:40], positions, cos_sin),
                2 * n * 40 * 128 * item,
            ),
        ]
        for name, fn, num_bytes in cases:
            ms = _bench_graph_ms(fn)
            print(f"{name:<22}{n:>7}{ms * 1e3:>9.1f}{num_bytes / ms / 1e6:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[8192, 32768, 131072])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--skip", choices=["decode", "prefill", "fused"], nargs="*", default=[])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("kernels_attention needs a CUDA GPU; nothing to do here.")
        return
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    if "decode" not in args.skip:
        bench_decode(_copy_ceiling_gbps(), args.contexts, args.batches)
    if "prefill" not in args.skip:
        bench_prefill(32768, 2048)
    if "fused" not in args.skip:
        bench_fused([1, 8, 256])


if __name__ == "__main__":
    main()
