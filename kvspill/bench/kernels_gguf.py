"""Benchmark of the GGUF quantized-weight kernels on a CUDA GPU: `python -m kvspill.bench.kernels_gguf`.

Prints, per type and Llama-3.1-8B linear shape (out x in), the GB/s of weight bytes that the
fused dequantize-GEMV reads for 1, 4 and 16 tokens (median of CUDA-graph replays, as decode
runs it), and that as a % of the card's ceiling (a device-to-device copy, read + write bytes).
Each replay runs the GEMV over enough copies of the weight (>= 256 MB in all) that they cannot
sit in L2, as a decode step streams each layer's weights once; the time per GEMV includes the
graph's gap between kernels.
`--dense` adds a dense bf16 torch matmul of the same shape (GB/s of its bf16 weight, 3.5x - 4x
the bytes); `--dequant` the dequantize kernel (GB/s of quantized bytes read + bf16 written);
`--generic` times the generic and dot kernels instead of the lane kernels (the baseline).

Invariant: importing this module does nothing; without CUDA `main` says so and returns.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from functools import partial

import torch

from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import FORMATS, SUPPORTED_TYPES, QuantizedWeight
from kvspill.kernels.gguf_gemv import quant_matmul_gemv

# Llama-3.1-8B decode linears (out_features x in_features).
SHAPES = {
    "qkv": (6144, 4096),
    "o": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
    "lm_head": (128256, 4096),
}
DEFAULT_TYPES = ["Q4_K", "Q6_K", "Q8_0"]  # the types of Q4_K_M files, and Q8_0
ROTATE_BYTES = 256 << 20  # weight bytes a timed replay streams (several times any L2)


def random_weight_cuda(qtype: str, out_features: int, in_features: int, seed: int = 0) -> QuantizedWeight:
    """Random but valid blocks drawn on the GPU (as random_quantized, without a host copy)."""
    fmt = FORMATS[qtype]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (out_features, in_features // fmt.block_size, fmt.type_size)
    blocks = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=gen)
    for offset in fmt.f16_offsets:
        d = torch.randn((*shape[:2], 1), device="cuda", generator=gen) * 0.01
        blocks[..., offset : offset + 2] = d.half().view(torch.uint8)
    return QuantizedWeight(blocks.reshape(out_features, -1), qtype, out_features, in_features)


def _copies(weight: QuantizedWeight) -> list[QuantizedWeight]:
    """`weight` and enough clones of it to stream ROTATE_BYTES a replay (each with its own copy of
    the scale pairs, where it has them, and the same layout)."""
    n = max(1, -(-ROTATE_BYTES // weight.nbytes))
    pairs = weight.scale_pairs
    return [weight] + [
        replace(weight, data=weight.data.clone(), scale_pairs=None if pairs is None else pairs.clone())
        for _ in range(n - 1)
    ]


def time_gemv_us(weights: list[QuantizedWeight], x: torch.Tensor) -> float:
    """Median us of one GEMV, from graph replays of one GEMV over each of `weights` in turn."""
    return time_rotating_us(quant_matmul_gemv, weights, x)


def time_rotating_us(fn, weights: list[QuantizedWeight], x: torch.Tensor, rep: int = 50) -> float:
    """Median us of one `fn(x, w)`, from graph replays of it over each of `weights` in turn."""

    def step() -> None:
        for w in weights:
            fn(x, w)

    fn(x, weights[0])  # compile outside the graph
    return _bench_ms(step, rep=rep) * 1e3 / len(weights)


def _bench_ms(fn, graph: bool = True, rep: int = 50) -> float:
    import triton.testing

    if graph:
        return float(triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median"))
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
    """Median us of one fused GEMV (weights streamed from HBM) and its GB/s of weight bytes."""
    weights = _copies(random_weight_cuda(qtype, out_features, in_features))
    x = torch.randn((num_tokens, in_features), dtype=dtype, device="cuda")
    us = time_gemv_us(weights, x)
    return us, weights[0].nbytes / us / 1e3


def bench_dense(out_features: int, in_features: int, num_tokens: int = 1) -> tuple[float, float]:
    """Median us and GB/s (of bf16 weight bytes) of torch's bf16 x @ W.T: the dense baseline
    (rotating over copies of W, as `bench_gemv`)."""
    nbytes = out_features * in_features * 2
    ws = [
        torch.randn((out_features, in_features), dtype=torch.bfloat16, device="cuda")
        for _ in range(max(1, -(-ROTATE_BYTES // nbytes)))
    ]
    x = torch.randn((num_tokens, in_features), dtype=torch.bfloat16, device="cuda")

    def step() -> None:
        for w in ws:
            torch.matmul(x, w.t())

    us = _bench_ms(step) * 1e3 / len(ws)
    return us, nbytes / us / 1e3


def bench_dequant(qtype: str, out_features: int, in_features: int) -> tuple[float, float]:
    """Median us of dequantizing to bf16 into a reused buffer, and GB/s read + written."""
    weight = random_weight_cuda(qtype, out_features, in_features)
    out = torch.empty((out_features, in_features), dtype=torch.bfloat16, device="cuda")
    ms = _bench_ms(partial(dequantize, weight, torch.bfloat16, out), graph=False)
    return ms * 1e3, (weight.nbytes + out.numel() * 2) / ms / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", nargs="*", default=DEFAULT_TYPES, choices=SUPPORTED_TYPES)
    parser.add_argument("--tokens", nargs="*", type=int, default=[1, 4, 16])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--dense", action="store_true", help="also time a dense bf16 matmul")
    parser.add_argument("--dequant", action="store_true", help="also time the dequantize kernel")
    parser.add_argument("--generic", action="store_true", help="generic/dot kernels only (baseline)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernels_gguf needs a CUDA GPU; none found.")
        return
    if args.generic:
        gguf_gemv.LANE_KERNELS.clear()
        gguf_gemv.FMA_CONFIG.update(gguf_gemv.GENERIC_FMA_CONFIG)
    ceiling = copy_ceiling_gbps()
    print(f"{torch.cuda.get_device_name()}: ceiling {ceiling:.0f} GB/s (D2D copy, read + write)")
    kernels = "generic/dot kernels" if args.generic else "default kernels"
    print(f"fused GEMV ({kernels}), bf16 x: GB/s of weight bytes (% of ceiling) [us] per token count")
    head = "".join(f"{f'{t} tok':>22}" for t in args.tokens)
    print(f"{'type':<6}{'shape':<22}{head}")
    for qtype in args.types:
        for name in args.shapes:
            out_f, in_f = SHAPES[name]
            weights = _copies(random_weight_cuda(qtype, out_f, in_f))
            cells = []
            for tokens in args.tokens:
                x = torch.randn((tokens, in_f), dtype=torch.bfloat16, device="cuda")
                us = time_gemv_us(weights, x)
                gbps = weights[0].nbytes / us / 1e3
                cells.append(f"{gbps:>6.0f} ({100 * gbps / ceiling:>3.0f}%) [{us:>6.1f}]")
            print(f"{qtype:<6}{f'{name} {out_f}x{in_f}':<22}" + "".join(f"{c:>22}" for c in cells))
            del weights
    if args.dense:
        print("dense bf16 torch matmul: GB/s of bf16 weight bytes [us]")
        for name in args.shapes:
            out_f, in_f = SHAPES[name]
            cells = []
            for tokens in args.tokens:
                us, gbps = bench_dense(out_f, in_f, tokens)
                cells.append(f"{gbps:>6.0f} ({100 * gbps / ceiling:>3.0f}%) [{us:>6.1f}]")
            print(f"{'bf16':<6}{f'{name} {out_f}x{in_f}':<22}" + "".join(f"{c:>22}" for c in cells))
    if args.dequant:
        print("dequantize to bf16: GB/s of quantized bytes read + bf16 written [us]")
        for qtype in args.types:
            us, gbps = bench_dequant(qtype, 14336, 4096)
            print(f"{qtype:<6}{'14336x4096':<22}{gbps:>6.0f} ({100 * gbps / ceiling:>3.0f}%) [{us:>6.1f}]")


if __name__ == "__main__":
    main()
