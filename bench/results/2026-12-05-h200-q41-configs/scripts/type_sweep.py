"""The one-token int16-x kernel's (CHUNK, BLOCK_N, warps) per 8B shape for Q5_K (q4k_int16x_kernel
with Q5=True; its table is Q4_K's picks, never swept for Q5_K), Q4_1 (q41_int16x_kernel) or Q8_0
(q80_int16x_kernel, KVSPILL_Q80_INT16X=1): the
table's config, then the others nearest it first within a deadline a shape, each output within 1e-2
of the table's largest value; the best re-timed against the table -> OUT/TYPE_sweep.jsonl and
OUT/TYPE_picks.json {shape: [chunk, block_n, warps] or "table"} (a pick must beat the table by 2%).
    python3 type_sweep.py Q5_K|Q4_1|Q8_0 OUT_DIR [SHAPE...]"""

import itertools
import json
import math
import sys
import time

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv

SHAPES = {
    "qkv": (6144, 4096),
    "o": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
    "lm_head": (128256, 4096),
}
TABLE_NAME = {"Q5_K": "Q5K_INT16X_CONFIGS", "Q4_1": "Q41_INT16X_CONFIGS", "Q8_0": "Q80_INT16X_CONFIGS"}
DEADLINE_S = 22.0  # a shape


def configs(qtype):
    if qtype == "Q4_1":  # lanes a thread: BLOCK_N * (CHUNK / 32 blocks) / (32 * warps)
        return [
            c
            for c in itertools.product((512, 1024, 2048, 4096), (1, 2, 4, 8, 16), (1, 2, 4, 8))
            if 2 <= c[1] * (c[0] // 32) // (32 * c[2]) <= 16
        ]
    if qtype == "Q8_0":  # pairs of blocks a thread: BLOCK_N * (CHUNK / 64) / (32 * warps)
        return [
            c
            for c in itertools.product((512, 1024, 2048, 4096), (1, 2, 4, 8, 16), (1, 2, 4, 8))
            if 1 <= c[1] * (c[0] // 64) // (32 * c[2]) <= 8
        ]
    # Q5_K: 16-byte lanes a thread, BLOCK_N * CHUNK / 1024 / warps (the Q4_K re-sweep's rule)
    return [
        c
        for c in itertools.product((512, 1024, 2048, 4096, 8192), (2, 4, 8, 16), (1, 2, 4, 8))
        if 2 <= c[1] * c[0] // 1024 // c[2] <= 16
    ]


def run(qtype, cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    name = TABLE_NAME[qtype]
    table = getattr(gguf_gemv, name)
    if cfg != "table":
        setattr(gguf_gemv, name, ((0, 0, tuple(cfg)),))
    try:
        if qtype in ("Q4_1", "Q8_0"):
            gguf_gemv._launch_block_lanes(x, w, None, out)
        else:
            gguf_gemv._launch_q4k_one_token(x, w, None, out)
    finally:
        setattr(gguf_gemv, name, table)
    return out


def sweep_shape(qtype, name, rows, k, log):
    t0 = time.time()
    ws = _copies(random_weight_cuda(qtype, rows, k))
    x = torch.randn((1, k), device="cuda").bfloat16()
    ref = run(qtype, "table", x, ws[0])
    table_cfg = gguf_gemv._int16x_config(ws[0])
    results = [("table", time_rotating_us(lambda x, w: run(qtype, "table", x, w), ws, x, rep=20))]
    near = sorted(
        configs(qtype), key=lambda c: sum(abs(math.log2(a / b)) for a, b in zip(c, table_cfg, strict=True))
    )
    for cfg in near:
        if time.time() - t0 > DEADLINE_S or tuple(cfg) == tuple(table_cfg) or cfg[0] > k:
            continue
        try:
            out = run(qtype, cfg, x, ws[0])
            err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
            us = time_rotating_us(lambda x, w, c=cfg: run(qtype, c, x, w), ws, x, rep=20)
        except Exception as e:  # noqa: BLE001 - a config the kernel refuses: logged, the sweep goes on
            log.write(json.dumps(dict(shape=name, cfg=cfg, error=f"{type(e).__name__}: {e}"[:200])) + "\n")
            continue
        log.write(json.dumps(dict(shape=name, cfg=cfg, us=round(us, 2), err=err)) + "\n")
        if err < 1e-2:
            results.append((cfg, us))
    best = min(results[1:], key=lambda r: r[1], default=results[0])
    again = {
        str(c): time_rotating_us(lambda x, w, c=c: run(qtype, c, x, w), ws, x, rep=40)
        for c in ("table", best[0])
    }
    pick = best[0] if again[str(best[0])] < 0.98 * again["table"] else "table"
    line = dict(
        type=qtype,
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
    qtype, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:] or list(SHAPES)
    with open(f"{out_dir}/{qtype}_sweep.jsonl", "a") as log:
        picks = {name: sweep_shape(qtype, name, *SHAPES[name], log) for name in names}
    json.dump(picks, open(f"{out_dir}/{qtype}_picks.json", "w"))


if __name__ == "__main__":
    main()
