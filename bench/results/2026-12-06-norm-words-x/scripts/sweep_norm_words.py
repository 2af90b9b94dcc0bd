"""The RMSNorm and the words form's x permutation in one launch (`norm_words_x`, from
norm_words_x.diff) against the two or three launches it replaces (`rms_norm` with the residual add,
then `words_x` per order), at the 8B's hidden size; us a call from CUDA-graph replays, PDL as the
engine has it. The gate before plumbing it into the layers: a Q4_K_M 8 x 2K step runs the pair 64
times (the norms before qkv and gate_up) and the Q6_K order 16 times more. Prints JSON lines.
Usage: python sweep_norm_words.py"""

from __future__ import annotations

import json
from functools import partial

import torch

from kvspill.bench.kernels_gguf import _bench_ms
from kvspill.kernels.fused_ops import rms_norm
from kvspill.kernels.gguf_mma import mma_t_pad
from kvspill.kernels.gguf_mma_words import norm_words_x, words_x

K, COPIES = 4096, 20


def separate(xs, res, weight, t_pad, layouts, counters) -> None:
    for x, r in zip(xs, res, strict=True):
        normed, _ = rms_norm(x, weight, 1e-5, r)
        for q in layouts:
            words_x(normed, q, t_pad, counters)


def fused(xs, res, weight, t_pad, layouts, counters) -> None:
    for x, r in zip(xs, res, strict=True):
        norm_words_x(x, weight, 1e-5, r, t_pad, layouts, counters)


def main() -> None:
    weight = torch.randn(K, device="cuda").to(torch.bfloat16)
    counters = torch.zeros(512, dtype=torch.int32, device="cuda")
    for tokens in (3, 8, 16, 32):
        t_pad = mma_t_pad(tokens)
        xs = [torch.randn((tokens, K), device="cuda").to(torch.bfloat16) for _ in range(COPIES)]
        res = [torch.randn((tokens, K), device="cuda").to(torch.bfloat16) for _ in range(COPIES)]
        for layouts in (("Q4_K",), ("Q4_K", "Q6_K")):
            runs = {name: partial(fn, xs, res, weight, t_pad, layouts, counters) for name, fn in (("separate", separate), ("fused", fused))}
            for run in runs.values():
                run()  # compile outside the graphs
            us = {name: _bench_ms(run) * 1e3 / COPIES for name, run in runs.items()}
            us["separate_again"] = _bench_ms(runs["separate"]) * 1e3 / COPIES
            print(json.dumps({"tokens": tokens, "layouts": layouts, **{k: round(v, 3) for k, v in us.items()}}), flush=True)


if __name__ == "__main__":
    main()
