"""q41_int16x_kernel's (CHUNK, BLOCK_N, warps) per 8B shape (Q4_1: what AWQ / GPTQ load as; its table
is Q5_K's picks, never swept for Q4_1): the table's config, then configs of 2-16 lanes a thread
nearest it first, within a deadline a shape, each output within 1e-2 of the table's largest value;
the best re-timed against the table -> OUT/q41_sweep.jsonl and OUT/q41_picks.json
{shape: [chunk, block_n, warps] or "table"} (a pick must beat the table by 2%).
    python3 q41_sweep.py OUT_DIR"""

import itertools
import json
import math
import sys
import time

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
CONFIGS = [
    c
    for c in itertools.product((512, 1024, 2048, 4096), (1, 2, 4, 8, 16), (1, 2, 4, 8))
    if 2 <= c[1] * (c[0] // 32) // (32 * c[2]) <= 16
]
TABLE = gguf_gemv.Q41_INT16X_CONFIGS
DEADLINE_S = 22.0  # a shape


def run(cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv.Q41_INT16X_CONFIGS = TABLE if cfg == "table" else ((0, 0, tuple(cfg)),)
    try:
        gguf_gemv._launch_q41_int16x(x, w, None, out)
    finally:
        gguf_gemv.Q41_INT16X_CONFIGS = TABLE
    return out


def sweep_shape(name, rows, k, log):
    t0 = time.time()
    ws = _copies(random_weight_cuda("Q4_1", rows, k))
    x = torch.randn((1, k), device="cuda").bfloat16()
    ref = run("table", x, ws[0])
    table_cfg = gguf_gemv._int16x_config(ws[0])
    results = [("table", time_rotating_us(lambda x, w: run("table", x, w), ws, x, rep=20))]
    near = sorted(
        CONFIGS, key=lambda c: sum(abs(math.log2(a / b)) for a, b in zip(c, table_cfg, strict=True))
    )
    for cfg in near:
        if time.time() - t0 > DEADLINE_S or tuple(cfg) == tuple(table_cfg):
            continue
        try:
            out = run(cfg, x, ws[0])
            err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
            us = time_rotating_us(lambda x, w, c=cfg: run(c, x, w), ws, x, rep=20)
        except Exception as e:  # noqa: BLE001 - a config the kernel refuses: logged, the sweep goes on
            log.write(json.dumps(dict(shape=name, cfg=cfg, error=f"{type(e).__name__}: {e}"[:200])) + "\n")
            continue
        log.write(json.dumps(dict(shape=name, cfg=cfg, us=round(us, 2), err=err)) + "\n")
        if err < 1e-2:
            results.append((cfg, us))
    best = min(results[1:], key=lambda r: r[1], default=results[0])
    again = {
        str(c): time_rotating_us(lambda x, w, c=c: run(c, x, w), ws, x, rep=40) for c in ("table", best[0])
    }
    pick = best[0] if again[str(best[0])] < 0.98 * again["table"] else "table"
    line = dict(
        shape=name,
        table_cfg=table_cfg,
        table_us=round(results[0][1], 2),
        best=best[0],
        best_us=round(best[1], 2),
        again={c: round(v, 2) for c, v in again.items()},
        pick=pick,
        tried=len(results) - 1,
        gbs_table=round(ws[0].nbytes / again["table"] / 1e3),
    )
    log.write(json.dumps(line) + "\n")
    print(json.dumps(line), flush=True)
    del ws
    torch.cuda.empty_cache()
    return pick


def main() -> None:
    out_dir = sys.argv[1]
    with open(f"{out_dir}/q41_sweep.jsonl", "a") as log:
        picks = {name: sweep_shape(name, rows, k, log) for name, (rows, k) in SHAPES.items()}
    json.dump(picks, open(f"{out_dir}/q41_picks.json", "w"))


if __name__ == "__main__":
    main()
