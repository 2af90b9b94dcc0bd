"""The CPU GGUF kernel against a dense linear of the same weight (fp16 and bf16), per shape and
token count: best of 5 rounds of 50 ms each, microseconds a call, on torch's thread count.

    python kernel_shapes.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from kvspill.kernels.cpu_gguf import cpu_gguf_matmul
from kvspill.kernels.gguf_formats import dequantize_ref, random_quantized

SHAPES = [  # the embedded SmolLM2's (Q4_1 layers, Q8_0 tied lm_head), an 8B's Q4_K_M ones
    ("Q4_1", 3072, 576), ("Q4_1", 576, 1536), ("Q4_1", 576, 576), ("Q8_0", 49152, 576),
    ("Q4_K", 4096, 4096), ("Q6_K", 4096, 4096), ("Q4_K", 28672, 4096),
]  # fmt: skip


def best_us(fn) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < 0.05:
            fn()
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    print(f"threads {torch.get_num_threads()}")
    print("| weight | tokens | GGUF kernel us | dense fp16 us | dense bf16 us |")
    print("|---|---|---|---|---|")
    for qtype, rows, cols in SHAPES:
        weight = random_quantized(qtype, rows, cols)
        dense = dequantize_ref(weight.data, qtype, cols)
        f16, b16 = dense.half(), dense.bfloat16()
        for tokens in (1, 4, 8):
            x = torch.randn(tokens, cols)
            xh, xb = x.half(), x.bfloat16()
            gguf = best_us(lambda: cpu_gguf_matmul(x, weight))  # noqa: B023
            half = best_us(lambda: F.linear(xh, f16))  # noqa: B023
            brain = best_us(lambda: F.linear(xb, b16))  # noqa: B023
            print(f"| {qtype} {rows}x{cols} | {tokens} | {gguf:.0f} | {half:.0f} | {brain:.0f} |", flush=True)


if __name__ == "__main__":
    main()
