"""`words_x` alone: each super-block's slab split over programs of ROWS rows (the engine's pick,
`gguf_mma_words.words_x_split`) against other splits and the one-program-a-super-block form
(ROWS 256, 4 warps: the kernel before the split), at the 8B's shapes; us a call from CUDA-graph
replays over COPIES inputs, PDL as the engine has it. Prints JSON lines.
Usage: python sweep_words_x.py"""

from __future__ import annotations

import json
from functools import partial

import torch

from kvspill.bench.kernels_gguf import _bench_ms
from kvspill.kernels import gguf_mma_words
from kvspill.kernels.gguf_mma import mma_t_pad

COPIES = 20
PICK = gguf_mma_words.words_x_split
SHAPES = [(4096, "Q4_K", False), (4096, "Q6_K", False), (14336, "Q4_K", True), (14336, "Q6_K", True)]
SPLITS = [(256, 4), (128, 2), (128, 4), (64, 2), (64, 4), (32, 2), (16, 2)]


def permute(xs, qtype, t_pad, counters, gated) -> None:
    for x in xs:
        gguf_mma_words.words_x(x, qtype, t_pad, counters, gated)


def main() -> None:
    counters = torch.zeros(512, dtype=torch.int32, device="cuda")
    for tokens in (8, 32):
        t_pad = mma_t_pad(tokens)
        for k, qtype, gated in SHAPES:
            width = 2 * k if gated else k
            xs = [torch.randn((tokens, width), device="cuda").to(torch.bfloat16) for _ in range(COPIES)]
            us = {}
            for split in [PICK(k, t_pad), *SPLITS]:
                gguf_mma_words.words_x_split = lambda _k, _t, split=split: split
                run = partial(permute, xs, qtype, t_pad, counters, gated)
                run()  # compile outside the graphs
                us[f"{split[0]}x{split[1]}"] = round(_bench_ms(run) * 1e3 / COPIES, 3)
            gguf_mma_words.words_x_split = PICK
            line = {"tokens": tokens, "k": k, "qtype": qtype, "gated": gated, "pick": "{}x{}".format(*PICK(k, t_pad)), "us": us}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
