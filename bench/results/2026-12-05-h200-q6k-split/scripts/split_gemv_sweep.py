"""q6k_int16x_kernel's (CHUNK, BLOCK_N, warps) per Q6_K shape in the split layout: the table's config
in gguf's layout and split, then every config of the side-by-side sweep
(../../2026-12-04-h200-q6k-side-by-side/scripts/q6sweep2.py's CONFIGS) split, each checked against
the table's output in gguf's layout (within 1e-2 of its largest value: other configs sum in
another order; `same`: bit-equal), those nearest the table's config first -> OUT/split_sweep.jsonl
and OUT/split_picks.json {shape: [chunk, block_n, warps] or "table"}.   python3 split_gemv_sweep.py OUT_DIR"""

import itertools
import json
import math
import sys
import time

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_formats import QuantizedWeight, split_q6k_rows

SHAPES = {"v": (1024, 4096), "down": (4096, 14336)}  # the two slower split (call 1)
CONFIGS = [
    c
    for c in itertools.product((512, 1024, 2048, 4096), (1, 2, 4, 8), (1, 2, 4, 8))
    if 32 * c[2] <= c[1] * 16 * (c[0] // 256) <= 256 * c[2]
]
TABLE = gguf_gemv.Q6K_INT16X_CONFIGS
DEADLINE_S = 60.0


def run(cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv.Q6K_INT16X_CONFIGS = TABLE if cfg == "table" else ((0, 0, tuple(cfg)),)
    try:
        gguf_gemv._launch_q6k_int16x(x, w, None, out)
    finally:
        gguf_gemv.Q6K_INT16X_CONFIGS = TABLE
    return out


def main() -> None:
    out_dir, t0, picks = sys.argv[1], time.time(), {}
    log = open(f"{out_dir}/split_sweep.jsonl", "a")
    for name, (rows, k) in SHAPES.items():
        copies = _copies(random_weight_cuda("Q6_K", rows, k))
        x = torch.randn((1, k), device="cuda").bfloat16()
        ref = run("table", x, copies[0])
        gguf_us = time_rotating_us(lambda x, w: run("table", x, w), copies, x, rep=20)
        split = [QuantizedWeight(split_q6k_rows(w.data), "Q6_K", rows, k, split=True) for w in copies]
        del copies
        results = [("table", time_rotating_us(lambda x, w: run("table", x, w), split, x, rep=20))]
        table_cfg = gguf_gemv._int16x_config(split[0])
        near = sorted(CONFIGS, key=lambda c: sum(abs(math.log2(a / b)) for a, b in zip(c, table_cfg)))
        for cfg in near:
            if time.time() - t0 > DEADLINE_S * (list(SHAPES).index(name) + 1) / len(SHAPES):
                break
            out = run(cfg, x, split[0])
            same, err = bool(torch.equal(out, ref)), float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
            us = time_rotating_us(lambda x, w: run(cfg, x, w), split, x, rep=20)
            log.write(json.dumps(dict(shape=name, cfg=cfg, us=round(us, 2), same=same, err=err)) + "\n")
            if err < 1e-2:
                results.append((cfg, us))
        best = min(results, key=lambda r: r[1])
        picks[name] = best[0]
        table_same = bool(torch.equal(run("table", x, split[0]), ref))
        line = dict(shape=name, table_cfg=table_cfg, table_same=table_same, gguf_table_us=round(gguf_us, 2), split_table_us=round(results[0][1], 2),
                    split_best=best[0], split_best_us=round(best[1], 2), tried=len(results) - 1)
        log.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)
        del split
        torch.cuda.empty_cache()
    json.dump(picks, open(f"{out_dir}/split_picks.json", "w"))


if __name__ == "__main__":
    main()
