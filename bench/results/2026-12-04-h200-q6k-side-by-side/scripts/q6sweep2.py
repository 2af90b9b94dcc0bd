"""Sweep q6k_int16x_kernel's (CHUNK, BLOCK_N, warps) per Q6_K shape (8B Q4_K_M file: lm_head, down, v;
1B: lm_head, down); per-shape best into OUT/q6picks.json (prof_q6.py).   python3 q6sweep.py OUT_DIR"""
import itertools, json, os, sys, time
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize

SHAPES = {"lm_head": (128256, 4096), "down": (4096, 14336), "v": (1024, 4096),
          "l1b_lm_head": (128256, 2048), "l1b_down": (2048, 8192)}
# row-lanes a thread holds: BLOCK_N / warps in 1..8
# new kernel: CHUNK // 256 blocks side by side (16 lanes each); row-lanes a thread: BLOCK_N * 16 * NB / (32 * warps) in 1..8
CONFIGS = ["today"] + [c for c in itertools.product((256, 512, 1024, 2048, 4096), (1, 2, 4, 8), (1, 2, 4, 8))
                       if 32 * c[2] <= c[1] * 16 * (c[0] // 256) <= 256 * c[2]]
if os.environ.get("Q6SHAPES"):
    SHAPES = json.loads(os.environ["Q6SHAPES"])
if os.environ.get("Q6CONFIGS"):
    CONFIGS = ["today", "table"] + [tuple(c) for c in json.loads(os.environ["Q6CONFIGS"])]
DEADLINE = float(os.environ.get("SWEEP_S", "200"))
FEW, MAIN, FEW_ROWS = (1024, 1, 1), (512, 2, 1), 4096  # the committed kernel's configs


sys.path.insert(0, os.path.dirname(__file__))
import old_int16x
from kvspill.kernels.triton_compat import triton
from kvspill.kernels.pdl import pdl_meta


def old_launch(x, weight, bias, out):
    """The committed kernel (NSUB pairs unrolled) with the committed configs."""
    rows = weight.out_features
    chunk, block_n, num_warps = FEW if rows < FEW_ROWS else MAIN
    old_int16x.q6k_int16x_kernel[(triton.cdiv(rows, block_n),)](
        x, weight.data, bias if bias is not None else x, out, rows, weight.in_features // 256, weight.data.stride(0),
        NSUB=max(1, chunk // 512), BLOCK_N=block_n, HAS_LINEAR_BIAS=bias is not None, USE_ASM=True,
        num_warps=num_warps, **pdl_meta(x.device))


TABLE = gguf_gemv.Q6K_INT16X_CONFIGS


def run(cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    if cfg == "today":
        old_launch(x, w, None, out)
        return out
    gguf_gemv.Q6K_INT16X_CONFIGS = TABLE if cfg == "table" else ((0, 0, tuple(cfg)),)
    try:
        gguf_gemv._launch_q6k_int16x(x, w, None, out)
    finally:
        gguf_gemv.Q6K_INT16X_CONFIGS = TABLE
    return out


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    print(f"copy ceiling {ceiling:.0f} GB/s; {len(CONFIGS)} configs", flush=True)
    log = open(f"{out_dir}/q6sweep.jsonl", "a")
    picks, t0 = {}, time.time()
    for name, (rows, k) in SHAPES.items():
        ws = _copies(random_weight_cuda("Q6_K", rows, k))
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ dequantize(ws[0], torch.float32).t()
        res = []
        for cfg in CONFIGS:
            if cfg != "today" and time.time() - t0 > DEADLINE:
                continue
            try:
                err = float((run(cfg, x, ws[0]).float() - ref).abs().max() / ref.abs().max())
                if not err < 1e-2:
                    raise RuntimeError(f"wrong: {err:.3g}")
                us = time_rotating_us(lambda x, w: run(cfg, x, w), ws, x, rep=10)
                rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:160])
            log.write(json.dumps(dict(shape=name, rows=rows, k=k, cfg=cfg, **rec)) + "\n"); log.flush()
            res.append((rec.get("us", 1e9), cfg))
        best = min(res, key=lambda r: r[0])
        picks[name] = dict(cfg=best[1], us=best[0], today_us=res[0][0],
                           gbs_best=round(ws[0].nbytes / best[0] / 1e3), top5=sorted(res, key=lambda r: r[0])[:5])
        print(f"{name} {rows}x{k} ({ws[0].nbytes/1e6:.1f} MB): today {res[0][0]} best {best[1]} {best[0]} "
              f"({picks[name]['gbs_best']} GB/s); top5 {picks[name]['top5']}", flush=True)
        del ws
        torch.cuda.empty_cache()
    json.dump(picks, open(f"{out_dir}/q6picks.json", "w"), indent=1)


if __name__ == "__main__":
    main()
