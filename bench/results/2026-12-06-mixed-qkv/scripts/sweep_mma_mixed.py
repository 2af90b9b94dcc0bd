"""The mixed qkv's one tensor-core launch (kernels/gguf_mma_mixed.py) against the two it replaces,
on an 8B Q4_K_M layer's qkv (q+k 5120 x 4096 Q4_K with scale pairs, v 1024 x 4096 Q6_K split) at
4 / 8 / 16 / 32 tokens: the table's configs, then part B's words configs on part A's warps. us a
call from CUDA-graph replays over copies past L2, PDL as the engine has it. One JSON line a row;
the last: the fastest part-B config per token count, where it beats the table's pair or the table
has none. Usage: python sweep_mma_mixed.py [TOKENS ...]"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import asdict, replace

import torch

from kvspill.bench.kernels_gguf import random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import split_q6k_rows
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import MmaConfig, for_shape, mma_config
from kvspill.kernels.gguf_mma_mixed import mixed_mma
from kvspill.kernels.gguf_mma_words import pack_scales

ROWS_A, ROWS_B, K, COPIES = 5120, 1024, 4096, 16


def layers() -> list[tuple]:
    out = []
    for i in range(COPIES):
        a = random_weight_cuda("Q4_K", ROWS_A, K, seed=2 * i)
        a = replace(a, scale_pairs=pack_scales(a, torch.bfloat16))
        b = random_weight_cuda("Q6_K", ROWS_B, K, seed=2 * i + 1)
        out.append((a, replace(b, data=split_q6k_rows(b.data), split=True)))
    return out


FULL = (8, 32)  # token counts that try part B's candidates (each config one compile of both bodies)


def candidates(warps: int, stages: int) -> list[MmaConfig]:
    return [
        MmaConfig(block_n=bn, num_warps=warps, split_k=sk, num_stages=stages, words=True)
        for bn, sk in itertools.product((32, 64), (4, 8, 16))
        if warps * 16 <= bn * 2
    ]


def main(token_counts: list[int]) -> None:
    ws = layers()
    best = {}
    for tokens in token_counts:
        x = torch.randn((tokens, K), device="cuda").to(torch.bfloat16)
        out = torch.empty((tokens, ROWS_A + ROWS_B), dtype=x.dtype, device="cuda")
        cfg_a, cfg_b = mma_config(ws[0][0], tokens), mma_config(ws[0][1], tokens)

        def separate(x, w, out=out):
            quant_matmul_mma(x, w[0], out=out[:, :ROWS_A])
            quant_matmul_mma(x, w[1], out=out[:, ROWS_A:])

        separate(x, ws[0])
        want = out.clone()
        sep_us = time_rotating_us(separate, ws, x)
        rows = [{"tokens": tokens, "form": "separate", "us": round(sep_us, 3)}]
        trials = [cfg_b] if cfg_b.num_warps == cfg_a.num_warps else []
        trials += candidates(cfg_a.num_warps, cfg_a.num_stages) if tokens in FULL else []
        for raw_b in trials:
            b = for_shape(raw_b, ROWS_B, K)

            def mixed(x, w, b=b, out=out, cfg_a=cfg_a):
                mixed_mma(x, list(w), None, out, (cfg_a, b))

            mixed(x, ws[0])
            equal = bool(torch.equal(out, want))
            us = time_rotating_us(mixed, ws, x)
            rows.append({"tokens": tokens, "form": "mixed", "config_b": asdict(raw_b), "us": round(us, 3), "bit_equal": equal})
        rows.append({"tokens": tokens, "form": "separate", "us": round(time_rotating_us(separate, ws, x), 3)})
        for row in rows:
            print(json.dumps(row), flush=True)
        mixed_rows = [r for r in rows if r["form"] == "mixed" and r["bit_equal"]]
        if not mixed_rows:
            continue
        top = min(mixed_rows, key=lambda r: r["us"])
        table = mixed_rows[0] if cfg_b.num_warps == cfg_a.num_warps else None
        if table is None or top["us"] < table["us"] * 0.98:
            best[tokens] = top["config_b"]
    print(json.dumps({"best": best}))


if __name__ == "__main__":
    main([int(t) for t in sys.argv[1:]] or [4, 8, 16, 32])
