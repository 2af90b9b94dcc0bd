"""The one-token Q6_K GEMV's (CHUNK, BLOCK_N, warps) for the split-layout lm_head (128256 x 4096, a
Llama-3.1-8B Q4_K_M file's largest weight, read every decode step): the table's config, then every
config of ../../2026-12-05-h200-q6k-split/scripts/split_gemv_sweep.py's set nearest it first, within
a deadline, each output within 1e-2 of the table's largest value -> OUT/lm_head_sweep.jsonl and
OUT/lm_head_pick.json ([chunk, block_n, warps] or "table"). The 2026-12-05 sweep of the split
layout covered v and down only; the lm_head took (512, 2, 1) from gguf's layout's sweep.
    python3 lm_head_sweep.py OUT_DIR"""

import itertools
import json
import math
import sys
import time

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_formats import QuantizedWeight, split_q6k_rows

ROWS, K = 128256, 4096
CONFIGS = [
    c
    for c in itertools.product((256, 512, 1024, 2048, 4096), (1, 2, 4, 8), (1, 2, 4, 8))
    if 32 * c[2] <= c[1] * 16 * (c[0] // 256) <= 256 * c[2]
]
TABLE = gguf_gemv.Q6K_INT16X_SPLIT_CONFIGS
DEADLINE_S = 70.0


def run(cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv.Q6K_INT16X_SPLIT_CONFIGS = TABLE if cfg == "table" else ((0, 0, tuple(cfg)),)
    try:
        gguf_gemv._launch_q6k_int16x(x, w, None, out)
    finally:
        gguf_gemv.Q6K_INT16X_SPLIT_CONFIGS = TABLE
    return out


def main() -> None:
    out_dir, t0 = sys.argv[1], time.time()
    log = open(f"{out_dir}/lm_head_sweep.jsonl", "a")
    copies = _copies(random_weight_cuda("Q6_K", ROWS, K))
    split = [QuantizedWeight(split_q6k_rows(w.data), "Q6_K", ROWS, K, split=True) for w in copies]
    del copies
    x = torch.randn((1, K), device="cuda").bfloat16()
    ref = run("table", x, split[0])
    results = [("table", time_rotating_us(lambda x, w: run("table", x, w), split, x, rep=20))]
    table_cfg = gguf_gemv._int16x_config(split[0])
    near = sorted(
        CONFIGS, key=lambda c: sum(abs(math.log2(a / b)) for a, b in zip(c, table_cfg, strict=True))
    )
    for cfg in near:
        if time.time() - t0 > DEADLINE_S or tuple(cfg) == tuple(table_cfg):
            continue
        try:
            out = run(cfg, x, split[0])
            err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
            us = time_rotating_us(lambda x, w, c=cfg: run(c, x, w), split, x, rep=20)
        except Exception as e:  # noqa: BLE001 - a config the kernel refuses: logged, the sweep goes on
            log.write(json.dumps(dict(cfg=cfg, error=f"{type(e).__name__}: {e}"[:200])) + "\n")
            continue
        log.write(
            json.dumps(dict(cfg=cfg, us=round(us, 2), same=bool(torch.equal(out, ref)), err=err)) + "\n"
        )
        if err < 1e-2:
            results.append((cfg, us))
    # a second look at the table and the best, so one lucky timing does not pick
    best = min(results[1:], key=lambda r: r[1], default=results[0])
    again = {
        str(c): time_rotating_us(lambda x, w, c=c: run(c, x, w), split, x, rep=40) for c in ("table", best[0])
    }
    pick = best[0] if again[str(best[0])] < 0.98 * again["table"] else "table"
    line = dict(
        table_cfg=table_cfg,
        table_us=round(results[0][1], 2),
        best=best[0],
        best_us=round(best[1], 2),
        again={k: round(v, 2) for k, v in again.items()},
        pick=pick,
        tried=len(results) - 1,
        gbs_table=round(split[0].nbytes / again["table"] / 1e3),
    )
    log.write(json.dumps(line) + "\n")
    print(json.dumps(line), flush=True)
    json.dump(pick, open(f"{out_dir}/lm_head_pick.json", "w"))


if __name__ == "__main__":
    main()
