"""Part B's (CHUNK, BLOCK_N) in the one-launch mixed GEMV (kernels/gguf_gemv_mixed.py) against the
two launches it replaces, on an 8B Q4_K_M (Q5_K_M) layer's qkv: q+k 5120 x 4096 Q4_K (Q5_K), v
1024 x 4096 Q6_K split; us a call from CUDA-graph replays over copies past L2, PDL as the engine
has it. Prints one JSON line a row; the last names the fastest config per warp count.
Usage: python sweep_mixed.py [Q4_K|Q5_K ...]"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import torch

from kvspill.bench.kernels_gguf import random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv_mixed
from kvspill.kernels.gguf_formats import split_q6k_rows
from kvspill.kernels.gguf_gemv import int16x_one_token_config, quant_matmul_gemv
from kvspill.kernels.gguf_gemv_mixed import mixed_gemv

ROWS_A, ROWS_B, K, COPIES = 5120, 1024, 4096, 20
CANDIDATES = {
    4: [(2048, 4), (4096, 4), (1024, 4), (512, 4), (2048, 2), (4096, 2), (2048, 8), (1024, 8)],
    2: [(2048, 2), (2048, 1), (4096, 1), (4096, 2), (1024, 2), (2048, 4)],
}


def layers(type_a: str) -> list[tuple]:
    out = []
    for i in range(COPIES):
        a = random_weight_cuda(type_a, ROWS_A, K, seed=2 * i)
        b = random_weight_cuda("Q6_K", ROWS_B, K, seed=2 * i + 1)
        out.append((a, replace(b, data=split_q6k_rows(b.data), split=True)))
    return out


def main(types: list[str]) -> None:
    x = torch.randn((1, K), device="cuda").to(torch.bfloat16)
    out = torch.empty((1, ROWS_A + ROWS_B), dtype=x.dtype, device="cuda")

    def separate(x, w):
        quant_matmul_gemv(x, w[0], out=out[:, :ROWS_A])
        quant_matmul_gemv(x, w[1], out=out[:, ROWS_A:])

    def mixed(x, w):
        mixed_gemv(x, list(w), None, out)

    best = {}
    for type_a in types:
        ws = layers(type_a)
        warps = int16x_one_token_config(x, ws[0][0])[2]
        separate(x, ws[0])
        want = out.clone()
        rows = [("separate", None, time_rotating_us(separate, ws, x))]
        for cfg in CANDIDATES.get(warps, [gguf_gemv_mixed.MIXED_Q6K_CONFIGS[warps]]):
            gguf_gemv_mixed.MIXED_Q6K_CONFIGS[warps] = cfg
            mixed(x, ws[0])
            equal = bool(torch.equal(out, want))
            rows.append(("mixed", cfg, time_rotating_us(mixed, ws, x), equal))
        rows.append(("separate", None, time_rotating_us(separate, ws, x)))
        for row in rows:
            print(json.dumps({"type_a": type_a, "warps": warps, "form": row[0], "config_b": row[1],
                              "us": round(row[2], 3), **({"bit_equal": row[3]} if len(row) > 3 else {})}))
        mixed_rows = [r for r in rows if r[0] == "mixed"]
        best[type_a] = min(mixed_rows, key=lambda r: r[2])[1]
    print(json.dumps({"best": best}))


if __name__ == "__main__":
    main(sys.argv[1:] or ["Q4_K", "Q5_K"])
