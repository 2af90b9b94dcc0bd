"""Variants of the coalesced one-token Q4_K GEMV (q4k16.py) beside today's lane kernel on the 8B shapes."""
import json, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
import torch

VARIANTS = [  # call 4's list; call 2 ran g16 variants, call 3 ns ones (their tables name them)
    ("ns", 8, 4, 1), ("ns", 2, 16, 1), ("ns", 2, 8, 1), ("ns", 4, 16, 2), ("ns", 2, 32, 2), ("ns", 2, 16, 2),
    ("ns", 1, 16, 1), ("ns", 1, 32, 1),
]


def run(x, w, v, out=None):
    from q4k16 import gemv16, gemv_ns
    if v[0] == "g16":
        _, sb, bn, vec, item, nw = v
        return gemv16(x, w, sb=sb, block_n=bn, vec16=vec, item=item, num_warps=nw, out=out)
    _, sb, bn, nw = v
    return gemv_ns(x, w, sb=sb, block_n=bn, num_warps=nw, out=out)


def _compile(task):
    from kvspill.bench.kernels_gguf import random_weight_cuda
    k, v = task
    try:
        w = random_weight_cuda("Q4_K", 64, k)
        run(torch.randn((1, k), dtype=torch.bfloat16, device="cuda"), w, v)
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa
        return f"{task}: {str(e)[:300]}"


def main():
    out_dir = sys.argv[1]
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=12, mp_context=get_context("spawn")) as pool:
        errs = [e for e in pool.map(_compile, [(k, v) for v in VARIANTS for k in (4096, 14336)]) if e]
    print(f"compiled in {time.time() - t0:.0f} s, errors {errs}", flush=True)
    from kvspill.bench.mma_sweep import Bench
    from kvspill.bench.kernels_gguf import SHAPES
    from kvspill.kernels.gguf_gemv import quant_matmul_gemv
    from kvspill.kernels.gguf_gemv_offset import q4k_one_token_kernel as q4k_gemv16_kernel
    bench = Bench()
    log = open(f"{out_dir}/sweep16.jsonl", "w")
    table = {}
    for shape in SHAPES:
        x, ref = bench.case("Q4_K", shape, 1)
        w0 = bench.copies("Q4_K", shape)[0]
        table[("old", shape)] = bench.time_us(lambda x, w: quant_matmul_gemv(x, w), "Q4_K", shape, 1)["us"]
        for v in VARIANTS:
            try:
                got = run(x, w0, v).float()
                err = float((got - ref).abs().max() / ref.abs().max())
                rec = dict(rel_err=err) if err < 1e-2 else dict(err=f"wrong {err}")
                if "err" not in rec:
                    rec.update(bench.time_us(lambda x, w, v=v: run(x, w, v), "Q4_K", shape, 1))
                    table[(v, shape)] = rec["us"]
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:300])
            log.write(json.dumps(dict(shape=shape, v=v, **rec)) + "\n")
        log.flush()
    regs = {}
    for key, k in q4k_gemv16_kernel.device_caches[0][0].items() if hasattr(q4k_gemv16_kernel, "device_caches") else []:
        try:
            regs[str(key)[:80]] = (k.n_regs, k.n_spills)
        except Exception:  # noqa
            pass
    names = list(SHAPES)
    print("variant" + "".join(f"{n:>10}" for n in names) + "   sum4")
    rows = []
    for v in ["old"] + VARIANTS:
        us = [table.get((v, n), float("nan")) for n in names]
        rows.append((sum(us[:4]), v, us))
    for s, v, us in sorted(rows, key=lambda r: r[0]):
        print(f"{str(v):28s}" + "".join(f"{u:10.2f}" for u in us) + f"{s:10.2f}")
    best = min((r for r in rows if r[1] != "old" and r[0] == r[0]), key=lambda r: r[0])
    json.dump(dict(best=best[1]), open(f"{out_dir}/best.json", "w"))
    print("best", best[1], "regs", list(regs.values())[:20])


if __name__ == "__main__":
    main()
