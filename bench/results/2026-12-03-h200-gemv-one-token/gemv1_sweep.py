"""One-token lane GEMV configs on the 8B shapes (H200), beside a read-only ceiling kernel per shape.

    python3 .devbench/gemv1_sweep.py OUT_DIR BUDGET_S
Writes OUT_DIR/gemv1.jsonl; prints per (type, shape): today's config, the best config, the read ceiling.
"""
import itertools, json, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch
import triton
import triton.language as tl

CONFIGS = {
    "Q4_K": [(c, b, w) for c, b, w in itertools.product((1024, 2048, 4096), (1, 2, 4, 8), (1, 2, 4))],
    "Q6_K": [(c, b, w) for c, b, w in itertools.product((512, 1024, 2048), (1, 2, 4), (1, 2, 4))],
}
KS = (4096, 14336)


@triton.jit
def _read_kernel(p, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(p + offs, mask=offs < n, other=0)
    tl.store(out + pid, tl.sum(v ^ (v >> 3), 0))


def read_fn(block, warps):
    def fn(x, w):
        words = w.data.view(torch.int32).reshape(-1)
        n = words.numel()
        g = triton.cdiv(n, block)
        out = torch.empty(g, dtype=torch.int32, device="cuda")
        _read_kernel[(g,)](words, out, n, BLOCK=block, num_warps=warps)
        return out
    return fn


def lane_fn(cfg):
    from kvspill.kernels import gguf_gemv

    def fn(x, w):
        out = torch.empty((x.shape[0], w.out_features), dtype=x.dtype, device=x.device)
        gguf_gemv._launch_lane_kernel(x, w, None, out, cfg)
        return out
    return fn


def _compile(task):
    from kvspill.bench.kernels_gguf import random_weight_cuda
    qtype, k, cfg = task
    try:
        w = random_weight_cuda(qtype, 64, k)
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda")
        lane_fn(cfg)(x, w)
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa
        return f"{task}: {str(e)[:200]}"


def main():
    out_dir, budget = sys.argv[1], float(sys.argv[2])
    import os
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    tasks = [(q, k, c) for q, cs in CONFIGS.items() for c in cs for k in KS]
    with ProcessPoolExecutor(max_workers=14, mp_context=get_context("spawn")) as pool:
        errs = [e for e in pool.map(_compile, tasks) if e]
    print(f"compiled {len(tasks)} in {time.time() - t0:.0f} s, errors {len(errs)} {errs[:3]}", flush=True)
    from kvspill.bench.mma_sweep import Bench
    from kvspill.bench.kernels_gguf import SHAPES
    from kvspill.kernels import gguf_gemv
    bench = Bench()
    print(f"ceiling {bench.ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/gemv1.jsonl", "a")
    summary = []
    for qtype, cfgs in CONFIGS.items():
        today = gguf_gemv.FMA_CONFIG[qtype]
        for shape in SHAPES:
            if time.time() - t0 > budget:
                print("budget spent"); break
            x, ref = bench.case(qtype, shape, 1)
            w0 = bench.copies(qtype, shape)[0]
            best_read = None
            for blk, nw in ((2048, 4), (4096, 4), (8192, 8)):
                r = bench.time_us(read_fn(blk, nw), qtype, shape, 1)
                log.write(json.dumps(dict(qtype=qtype, shape=shape, read=(blk, nw), **r)) + "\n")
                if best_read is None or r["us"] < best_read["us"]:
                    best_read = dict(cfg=(blk, nw), **r)
            res = {}
            for cfg in cfgs:
                try:
                    got = lane_fn(cfg)(x, w0).float()
                    err = float((got - ref).abs().max() / ref.abs().max())
                    if not err < 2e-2:
                        rec = dict(err=f"wrong {err:.3g}")
                    else:
                        rec = dict(rel_err=round(err, 5), **bench.time_us(lane_fn(cfg), qtype, shape, 1))
                except Exception as e:  # noqa
                    rec = dict(err=str(e)[:200])
                res[cfg] = rec
                log.write(json.dumps(dict(qtype=qtype, shape=shape, cfg=cfg, **rec)) + "\n")
            log.flush()
            ok = {c: r for c, r in res.items() if "us" in r}
            best = min(ok, key=lambda c: ok[c]["us"])
            line = (f"{qtype} {shape:8s} today {today} {res[today].get('us')} us {res[today].get('pct')}% | "
                    f"best {best} {ok[best]['us']} us {ok[best]['pct']}% | read {best_read['us']} us {best_read['pct']}%")
            print(line, flush=True)
            summary.append(line)
    open(f"{out_dir}/summary.txt", "w").write("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
