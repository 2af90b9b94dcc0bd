"""Benchmark of the fp8 weight kernels on a CUDA GPU: `python -m kvspill.bench.kernels_fp8`.

Prints, per Llama-3.1-8B linear shape (out x in) and token count, the GB/s of weight bytes read
by the fp8 decode GEMV (kernels/fp8_gemv.py) at `gemv_config`'s tiles, by the activation-quantizing
`torch._scaled_mm` path, and by a dense bf16 matmul of the same shape (its bf16 bytes: twice the
fp8 ones), as kernels_gguf measures: medians of CUDA-graph replays rotating over enough weight
copies (>= 256 MB) that L2 cannot hold them. `--sweep` times a grid of tile configurations per
shape and prints the best (how `gemv_config`'s table was chosen).

Invariant: importing this module does nothing; without CUDA `main` says so and returns.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from kvspill.bench.kernels_gguf import ROTATE_BYTES, SHAPES, _bench_ms, bench_dense, copy_ceiling_gbps
from kvspill.kernels.fp8_gemv import GemvConfig, fp8_gemv, gemv_config
from kvspill.kernels.fp8_linear import FP8_DTYPE, fp8_linear

SWEEP_ONE_TOKEN = [
    GemvConfig(bn, bk, w, s)
    for bn, bk, w, s in itertools.product([4, 8, 16, 32], [256, 512, 1024, 2048], [4, 8], [3])
    if bn * bk <= 16384
]
SWEEP_DOT = [
    GemvConfig(bn, bk, w, s) for bn, bk, w, s in itertools.product([16, 32, 64], [128, 256], [4], [3, 4])
]


def _weights(out_features: int, in_features: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random fp8 weights with scales, enough copies to stream ROTATE_BYTES a replay."""
    nbytes = out_features * in_features
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn((out_features, in_features), device="cuda", generator=gen) * 0.02).to(FP8_DTYPE)
    scale = torch.full((out_features,), 1e-3, device="cuda")
    return [(w if i == 0 else w.clone(), scale) for i in range(max(1, -(-ROTATE_BYTES // nbytes)))]


def time_us(fn, weights: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> float:
    """Median us of one call `fn(x, w, scale)`, from graph replays over each weight in turn."""

    def step() -> None:
        for w, scale in weights:
            fn(x, w, scale)

    fn(x, *weights[0])  # compile outside the graph
    return _bench_ms(step) * 1e3 / len(weights)


def sweep(out_features: int, in_features: int, num_tokens: int) -> tuple[GemvConfig, float]:
    """Best config and its GB/s for one shape and token count."""
    weights = _weights(out_features, in_features)
    x = torch.randn((num_tokens, in_features), dtype=torch.bfloat16, device="cuda")
    best: tuple[GemvConfig, float] | None = None
    for cfg in SWEEP_ONE_TOKEN if num_tokens == 1 else SWEEP_DOT:
        try:
            us = time_us(lambda a, w, s, c=cfg: fp8_gemv(a, w, s, config=c), weights, x)
        except Exception as exc:  # a config the compiler cannot fit (shared memory, registers)
            print(f"    {cfg}: {type(exc).__name__}")
            continue
        gbps = out_features * in_features / us / 1e3
        if best is None or gbps > best[1]:
            best = (cfg, gbps)
    assert best is not None, "no configuration compiled"
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--sweep", action="store_true", help="time a grid of tile configurations")
    parser.add_argument("--table-out", help="with --sweep: write the best configs as JSON here")
    args = parser.parse_args(argv)
    table: dict[str, list[int]] = {}
    if not torch.cuda.is_available():
        print("kernels_fp8 needs a CUDA GPU")
        return
    print(f"{torch.cuda.get_device_name()}; copy ceiling {copy_ceiling_gbps():.0f} GB/s (read + write)")
    for (name, (n, k)), t in itertools.product(SHAPES.items(), args.tokens):
        weights = _weights(n, k)
        x = torch.randn((t, k), dtype=torch.bfloat16, device="cuda")
        gemv = n * k / time_us(fp8_gemv, weights, x) / 1e3
        scaled = n * k / time_us(lambda a, w, s: fp8_linear(a, w, s, path="scaled_mm"), weights, x) / 1e3
        dense_gbps = bench_dense(n, k, t)[1]
        line = f"{name:8s} {n}x{k} t={t:2d}: gemv {gemv:6.0f} GB/s ({gemv_config(t, n, k, 1)}), "
        print(line + f"scaled_mm {scaled:6.0f}, bf16 dense {dense_gbps:6.0f} GB/s")
        if args.sweep and name != "lm_head":
            cfg, best = sweep(n, k, t)
            print(f"    best {best:6.0f} GB/s with {cfg}")
            table[f"{t}:{n}x{k}"] = list(cfg)
    if args.table_out:
        with open(args.table_out, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
