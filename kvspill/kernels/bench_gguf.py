"""Benchmark of the GGUF quantized-weight kernels on a CUDA GPU: `python -m kvspill.kernels.bench_gguf`.

Prints, per type and Llama-3-8B linear shape, the median time of the fused dequantize-GEMV
(replayed from a CUDA graph, as decode runs it) and the GB/s of weight bytes it read, against
the card's ceiling (a device-to-device copy, read + write bytes) and against a dense bf16
torch matmul of the same shape (its GB/s counts the bf16 weight, 3.5x - 4x the bytes). Also the
dequantize kernel (GB/s of quantized bytes read + dense bytes written).

Invariant: importing this module does nothing; without CUDA `main` says so and returns.
"""

from __future__ import annotations

import argparse
from functools import partial

import torch

from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import SUPPORTED_TYPES, random_quantized
from kvspill.kernels.gguf_gemv import quant_matmul_gemv

SHAPES = {
    "qkvo 4096x4096": (4096, 4096),
    "gate/up 14336x4096": (14336, 4096),
    "down 4096x14336": (4096, 14336),
}


def _bench_ms(fn, graph: bool = True) -> float:
    import triton.testing

    if graph:
        return float(triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median"))
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_ceiling_gbps() -> float:
    """Device-to-device copy of 1 GiB, counting bytes read and written."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * (1 << 30) / _bench_ms(partial(dst.copy_, src), graph=False) / 1e6


def bench_gemv(
    qtype: str,
    out_features: int,
    in_features: int,
    num_tokens: int = 1,
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[float, float]:
    """Median us of one fused GEMV and its GB/s of weight bytes; prints nothing."""
    weight = random_quantized(qtype, out_features, in_features).to("cuda")
    x = torch.randn((num_tokens, in_features), dtype=dtype, device="cuda")
    quant_matmul_gemv(x, weight)  # compile outside the graph
    ms = _bench_ms(partial(quant_matmul_gemv, x, weight))
    return ms * 1e3, weight.nbytes / ms / 1e6


def bench_dense(out_features: int, in_features: int, num_tokens: int = 1) -> tuple[float, float]:
    """Median us and GB/s (of bf16 weight bytes) of torch's bf16 x @ W.T: the dense baseline."""
    w = torch.randn((out_features, in_features), dtype=torch.bfloat16, device="cuda")
    x = torch.randn((num_tokens, in_features), dtype=torch.bfloat16, device="cuda")
    ms = _bench_ms(partial(torch.matmul, x, w.t()))
    return ms * 1e3, w.numel() * 2 / ms / 1e6


def bench_dequant(qtype: str, out_features: int, in_features: int) -> tuple[float, float]:
    """Median us of dequantizing to bf16 into a reused buffer, and GB/s read + written."""
    weight = random_quantized(qtype, out_features, in_features).to("cuda")
    out = torch.empty((out_features, in_features), dtype=torch.bfloat16, device="cuda")
    ms = _bench_ms(partial(dequantize, weight, torch.bfloat16, out), graph=False)
    return ms * 1e3, (weight.nbytes + out.numel() * 2) / ms / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", nargs="*", default=list(SUPPORTED_TYPES))
    parser.add_argument("--tokens", nargs="*", type=int, default=[1, 4, 16])
    parser.add_argument("--no-dequant", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_gguf needs a CUDA GPU; none found.")
        return
    ceiling = copy_ceiling_gbps()
    print(f"{torch.cuda.get_device_name()}: ceiling {ceiling:.0f} GB/s (D2D copy, read + write)")
    print("\n== fused GEMV, bf16 x; GB/s of weight bytes; dense = torch bf16 matmul, bf16 weight bytes")
    print(
        f"{'type':<6}{'shape':<20}{'tokens':>7}{'us':>9}{'GB/s':>8}{'% ceil':>8}{'dense us':>10}{'dense GB/s':>11}"
    )
    for shape_name, (out_f, in_f) in SHAPES.items():
        for tokens in args.tokens:
            dense_us, dense_gbps = bench_dense(out_f, in_f, tokens)
            for qtype in args.types:
                us, gbps = bench_gemv(qtype, out_f, in_f, tokens)
                print(
                    f"{qtype:<6}{shape_name:<20}{tokens:>7}{us:>9.1f}{gbps:>8.0f}{100 * gbps / ceiling:>7.0f}%"
                    f"{dense_us:>10.1f}{dense_gbps:>11.0f}"
                )
    if not args.no_dequant:
        print("\n== dequantize to bf16 (GB/s of quantized bytes read + bf16 written)")
        for qtype in args.types:
            us, gbps = bench_dequant(qtype, 14336, 4096)
            print(f"{qtype:<6}{'14336x4096':<20}{us:>9.1f}{gbps:>8.0f}{100 * gbps / ceiling:>7.0f}%")


if __name__ == "__main__":
    main()
