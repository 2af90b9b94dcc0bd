"""The one-token Q4_K int16-x GEMV as a persistent row-tile loop (KVSPILL_GEMV_ROWS_LOOP=P,S,
kernels/gguf_gemv_int16x.q4k_int16x_rows_kernel) against the one-tile kernel, on the 8B shapes whose
K fits one step (each with the table's config), one bf16 token, weights streamed past L2, us;
every output compared with the one-tile kernel's (the same bits are expected). Then the sum over
the shapes per (P, S) -> OUT/rows_sweep.jsonl, OUT/rows_pick.txt ("P,S" of the best sum, or
"0" if none beat the one-tile kernels by 2%).   python3 rows_sweep.py OUT_DIR"""

import json
import os
import sys
import time

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv

SHAPES = {"qkv": (6144, 4096), "qk": (5120, 4096), "o": (4096, 4096), "gate_up": (28672, 4096)}
SETTINGS = ["0", "1,2", "1,3", "2,2", "2,3", "3,2", "3,3", "4,2", "1,4", "2,4"]
DEADLINE_S = 100.0


def run(x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv._launch_q4k_one_token(x, w, None, out)
    return out


def main() -> None:
    out_dir, t0 = sys.argv[1], time.time()
    sums: dict[str, float] = {}
    shapes_done: dict[str, int] = {}
    with open(f"{out_dir}/rows_sweep.jsonl", "a") as log:
        for name, (rows, k) in SHAPES.items():
            ws = _copies(random_weight_cuda("Q4_K", rows, k))
            x = torch.randn((1, k), device="cuda").bfloat16()
            os.environ["KVSPILL_GEMV_ROWS_LOOP"] = "0"
            ref = run(x, ws[0])
            for setting in SETTINGS:
                if time.time() - t0 > DEADLINE_S:
                    break
                os.environ["KVSPILL_GEMV_ROWS_LOOP"] = setting
                try:
                    same = bool(torch.equal(run(x, ws[0]), ref))
                    us = time_rotating_us(run, ws, x, rep=30)
                except Exception as e:  # noqa: BLE001 - logged, the sweep goes on
                    log.write(
                        json.dumps(dict(shape=name, setting=setting, error=f"{type(e).__name__}: {e}"[:300]))
                        + "\n"
                    )
                    continue
                line = dict(
                    shape=name,
                    config=gguf_gemv._int16x_config(ws[0]),
                    setting=setting,
                    us=round(us, 2),
                    same=same,
                    gbs=round(ws[0].nbytes / us / 1e3),
                )
                log.write(json.dumps(line) + "\n")
                print(json.dumps(line), flush=True)
                if same:
                    sums[setting] = sums.get(setting, 0.0) + us
                    shapes_done[setting] = shapes_done.get(setting, 0) + 1
            del ws
            torch.cuda.empty_cache()
    os.environ["KVSPILL_GEMV_ROWS_LOOP"] = "0"
    full = {s: v for s, v in sums.items() if shapes_done[s] == len(SHAPES)}  # every shape, the same bits
    best = min(full, key=full.get) if full else "0"
    pick = best if best != "0" and full[best] < 0.98 * full.get("0", float("inf")) else "0"
    print(json.dumps(dict(sums={s: round(v, 2) for s, v in full.items()}, pick=pick)), flush=True)
    open(f"{out_dir}/rows_pick.txt", "w").write(pick)


if __name__ == "__main__":
    main()
