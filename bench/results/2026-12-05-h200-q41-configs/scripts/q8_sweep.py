"""Q8_0's one-token config (gguf_gemv.FMA_CONFIG["Q8_0"]: the generic FMA kernel's (CHUNK,
BLOCK_N, warps), one for every shape, picked on an H100 on 2026-11-26) re-swept: each config
timed on the 8B shapes and the lm_head, nearest the table's first, within a deadline; the config
with the least summed time re-timed against the table -> OUT/q8_sweep.jsonl, OUT/q8_pick.json
([chunk, block_n, warps] or "table"; it must beat the table by 2%).
    python3 q8_sweep.py OUT_DIR"""

import itertools
import json
import math
import sys
import time

import torch

from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv

TABLE = gguf_gemv.FMA_CONFIG["Q8_0"]
CONFIGS = [
    c
    for c in itertools.product((256, 512, 1024, 2048, 4096), (1, 2, 4, 8, 16), (1, 2, 4, 8))
    if 1 <= c[1] * (c[0] // 32) // (32 * c[2]) <= 16  # 34-byte blocks a thread
]
DEADLINE_S = 100.0


def run(cfg, x, w):
    gguf_gemv.FMA_CONFIG["Q8_0"] = tuple(cfg)
    try:
        return gguf_gemv.quant_matmul_gemv(x, w)
    finally:
        gguf_gemv.FMA_CONFIG["Q8_0"] = TABLE


def main() -> None:
    out_dir, t0 = sys.argv[1], time.time()
    weights = {name: _copies(random_weight_cuda("Q8_0", n, k)) for name, (n, k) in SHAPES.items()}
    xs = {name: torch.randn((1, k), device="cuda").bfloat16() for name, (_, k) in SHAPES.items()}
    refs = {name: run(TABLE, xs[name], ws[0]).float() for name, ws in weights.items()}

    def timed(cfg, rep=20):
        per = {}
        for name, ws in weights.items():
            out = run(cfg, xs[name], ws[0]).float()
            if not float((out - refs[name]).abs().max() / refs[name].abs().max()) < 1e-2:
                raise RuntimeError(f"{name}: wrong output")
            per[name] = round(time_rotating_us(lambda x, w: run(cfg, x, w), ws, xs[name], rep=rep), 2)
        return per

    near = sorted(CONFIGS, key=lambda c: sum(abs(math.log2(a / b)) for a, b in zip(c, TABLE, strict=True)))
    sums = {}
    with open(f"{out_dir}/q8_sweep.jsonl", "a") as log:
        for cfg in [TABLE] + [c for c in near if c != TABLE]:
            if time.time() - t0 > DEADLINE_S:
                break
            try:
                per = timed(cfg)
            except Exception as e:  # noqa: BLE001 - a config refused or wrong: logged, the sweep goes on
                log.write(json.dumps(dict(cfg=cfg, error=f"{type(e).__name__}: {e}"[:200])) + "\n")
                continue
            sums[cfg] = sum(per.values())
            log.write(json.dumps(dict(cfg=cfg, us=per, sum=round(sums[cfg], 2))) + "\n")
        best = min(sums, key=sums.get)
        again = {str(c): sum(timed(c, rep=40).values()) for c in (TABLE, best)}
        pick = list(best) if again[str(best)] < 0.98 * again[str(TABLE)] else "table"
        line = dict(
            table=TABLE,
            best=best,
            sums_first=[round(sums[TABLE], 2), round(sums[best], 2)],
            again={c: round(v, 2) for c, v in again.items()},
            pick=pick,
            tried=len(sums),
        )
        log.write(json.dumps(line) + "\n")
    print(json.dumps(line), flush=True)
    json.dump(pick, open(f"{out_dir}/q8_pick.json", "w"))


if __name__ == "__main__":
    main()
